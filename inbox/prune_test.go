package inbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// pruneOld is more old records than two of Prune's batches.
const pruneOld = 25_000

// Prune deletes the consumer's records older than keep, over several
// batches, and leaves its newer records and other consumers' alone.
func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pool, table := testdb.NewEmpty(t)
		ident := pgx.Identifier{table.Schema, inbox.DefaultTable}.Sanitize()
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{table.Schema}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		tbl := outbox.Table{Schema: table.Schema}
		if _, err := migrations.UpInbox(ctx, pool, tbl); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO "+ident+` (consumer, event_id, topic, received_at)
SELECT CASE WHEN n <= $1 THEN 'bench' ELSE 'other' END, lpad(to_hex(n), 32, '0')::uuid, 'orders', now() - interval '1 day'
FROM generate_series(1, $1 + 10) AS n
UNION ALL
SELECT 'bench', gen_random_uuid(), 'orders', now() FROM generate_series(1, 10)`, pruneOld); err != nil {
			t.Fatal(err)
		}
		in := newTestInbox(t, inbox.Config{Consumer: "bench", Table: tbl})
		checkPrune(t, in, pool, func() (bench, other int) {
			if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE consumer = 'bench'), count(*) FILTER (WHERE consumer = 'other') FROM "+ident).
				Scan(&bench, &other); err != nil {
				t.Fatal(err)
			}
			return bench, other
		})
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		db, _ := mariadbtest.DB(t)
		if _, err := migrations.UpMySQLInbox(ctx, db, outbox.Table{}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(fmt.Sprintf(`INSERT INTO inbox (consumer, event_id, topic, received_at)
SELECT IF(seq <= ?, 'bench', 'other'), UNHEX(LPAD(HEX(seq), 32, '0')), 'orders', UTC_TIMESTAMP(6) - INTERVAL 1 DAY
FROM seq_1_to_%d
UNION ALL
SELECT 'bench', UNHEX(MD5(seq)), 'orders', UTC_TIMESTAMP(6) FROM seq_1_to_10`, pruneOld+10), pruneOld); err != nil {
			t.Fatal(err)
		}
		in := newTestInbox(t, inbox.Config{Consumer: "bench", MySQL: true})
		checkPrune(t, in, outbox.FromSQL(db), func() (bench, other int) {
			if err := db.QueryRow("SELECT COALESCE(SUM(consumer = 'bench'), 0), COALESCE(SUM(consumer = 'other'), 0) FROM inbox").
				Scan(&bench, &other); err != nil {
				t.Fatal(err)
			}
			return bench, other
		})
	})
}

func checkPrune(t *testing.T, in *inbox.Inbox, db outbox.Executor, count func() (bench, other int)) {
	t.Helper()
	n, err := in.Prune(context.Background(), db, time.Hour)
	if err != nil || n != pruneOld {
		t.Fatalf("Prune deleted %d records (%v), want %d", n, err, pruneOld)
	}
	if bench, other := count(); bench != 10 || other != 10 {
		t.Errorf("after Prune: %d records of bench, %d of other; want bench's 10 new ones and other's 10 old ones", bench, other)
	}
}

package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
)

// The janitor's DELETE reads sent_idx (migration 004) from its low end
// and deletes what it found by primary key, never scanning the table, on a
// table where sent rows of every age sit between pending and failed ones.
func TestDeleteSentUsesSentIndex(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+` (id, topic, payload, status, sent_at)
SELECT gen_random_uuid(), 'orders', '\x00',
       (ARRAY['sent', 'sent', 'sent', 'pending', 'failed'])[1 + i % 5],
       CASE WHEN i % 5 < 3 THEN now() - (i % 720) * interval '1 hour' END
FROM generate_series(1, 20000) AS i`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, table)
	for _, retention := range []time.Duration{time.Hour, 7 * 24 * time.Hour, 365 * 24 * time.Hour} {
		plan := explainPlan(t, pool, s.q.deleteSent, pgx.NamedArgs{"retention_ms": retention.Milliseconds(), "limit": 1000})
		if testing.Verbose() {
			t.Logf("retention %v:\n%s", retention, plan)
		}
		if p := plan; !strings.Contains(p, "Index Scan using outbox_sent_idx") || !strings.Contains(p, "outbox_pkey") ||
			strings.Contains(p, "Seq Scan") {
			t.Errorf("retention %v: the DELETE does not pick rows from sent_idx and delete them by primary key:\n%s", retention, p)
		}
	}
}

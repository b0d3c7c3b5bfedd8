package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// What the inbox costs a consumer. Run
//
//	go test ./inbox -run '^$' -bench 'BenchmarkInbox$' -count 5
//
// and read each line's on/off and added-us/msg.

// benchPayload is an effect's body: 200 bytes.
var benchPayload = fmt.Sprintf("%0200d", 0)

// benchConsumer is the consumer of every benchmark.
const benchConsumer = "bench"

// bigInbox is how many records an inbox holds before the benchmark
// starts, in the variants that measure the cost at size.
const bigInbox = 1_000_000

// benchChunk is how many messages each consumer applies in one mode
// before the benchmark switches to the other.
const benchChunk = 25

// benchDB is one database under benchmark: the consumer's effect per
// message, without the inbox and through it.
type benchDB struct {
	// plain commits a transaction that inserts m's effect row.
	plain func(ctx context.Context, m inbox.Message) error
	// handled does the same through the inbox.
	handled func(ctx context.Context, m inbox.Message) error
}

// BenchmarkInbox measures a consumer's work per message: one transaction
// that inserts one effect row (the event id and 200 bytes) and commits,
// without the inbox (off) and through Handle on PostgreSQL (pgx pool) or
// HandleSQL on MariaDB (on), by 1 or 8 concurrent consumers, on an empty
// inbox table and on one already holding 1,000,000 records of other
// events. One op is a message of each mode; the modes alternate every
// benchChunk messages per consumer, so that both see the same machine.
// It reports each mode's msgs/s and mean latency of one message
// (us/msg), their ratio on/off and the latency the inbox adds.
func BenchmarkInbox(b *testing.B) {
	for _, db := range []struct {
		name string
		open func(b *testing.B, records int) benchDB
	}{{"postgres", openPostgres}, {"mariadb", openMariaDB}} {
		for _, records := range []int{0, bigInbox} {
			b.Run(fmt.Sprintf("db=%s/records=%d", db.name, records), func(b *testing.B) {
				d := db.open(b, records)
				for _, consumers := range []int{1, 8} {
					b.Run(fmt.Sprintf("consumers=%d", consumers), func(b *testing.B) { benchConsume(b, consumers, d) })
				}
			})
		}
	}
}

// benchMode is what one mode of benchConsume spent.
type benchMode struct {
	wall, busy time.Duration // elapsed in its phases; summed over its messages
	n          int
}

// benchConsume applies b.N messages of each mode from consumers
// goroutines, in alternate phases of benchChunk messages per consumer.
func benchConsume(b *testing.B, consumers int, d benchDB) {
	var off, on benchMode
	b.ResetTimer()
	for done := 0; done < b.N; done += consumers * benchChunk {
		n := min(benchChunk, (b.N-done+consumers-1)/consumers)
		phase(b, consumers, n, d.plain, &off)
		phase(b, consumers, n, d.handled, &on)
	}
	b.StopTimer()
	perSec := func(m benchMode) float64 { return float64(m.n) / m.wall.Seconds() }
	latency := func(m benchMode) float64 { return float64(m.busy.Microseconds()) / float64(m.n) }
	b.ReportMetric(perSec(off), "off-msgs/s")
	b.ReportMetric(perSec(on), "on-msgs/s")
	b.ReportMetric(perSec(on)/perSec(off), "on/off")
	b.ReportMetric(latency(off), "off-us/msg")
	b.ReportMetric(latency(on), "on-us/msg")
	b.ReportMetric(latency(on)-latency(off), "added-us/msg")
}

// phase applies n messages per consumer through apply and adds the time
// it took to m.
func phase(b *testing.B, consumers, n int, apply func(context.Context, inbox.Message) error, m *benchMode) {
	var (
		busy   atomic.Int64
		wg     sync.WaitGroup
		failed atomic.Value
	)
	start := time.Now()
	for range consumers {
		wg.Go(func() {
			for range n {
				msg := inbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders", Payload: []byte(benchPayload)}
				t := time.Now()
				if err := apply(context.Background(), msg); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				busy.Add(int64(time.Since(t)))
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	m.wall += time.Since(start)
	m.busy += time.Duration(busy.Load())
	m.n += consumers * n
}

// openPostgres makes a schema with an effects table and an inbox table
// holding records old records of other events.
func openPostgres(b *testing.B, records int) benchDB {
	ctx := context.Background()
	pool, table := testdb.NewEmpty(b)
	pool = consumerPool(b)
	schema := pgx.Identifier{table.Schema}.Sanitize()
	effects := pgx.Identifier{table.Schema, "effects"}.Sanitize()
	for _, stmt := range []string{
		"CREATE SCHEMA " + schema,
		`CREATE TABLE ` + effects + ` (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id   uuid        NOT NULL,
    payload    text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			b.Fatal(err)
		}
	}
	inboxTable := outbox.Table{Schema: table.Schema}
	if _, err := migrations.UpInbox(ctx, pool, inboxTable); err != nil {
		b.Fatal(err)
	}
	in := newTestInbox(b, inbox.Config{Consumer: benchConsumer, Table: inboxTable})
	fillPostgres(b, pool, inboxTable, records)
	insert := "INSERT INTO " + effects + " (event_id, payload) VALUES ($1, $2)"
	return benchDB{
		plain: func(ctx context.Context, m inbox.Message) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insert, m.ID, string(m.Payload))
				return err
			})
		},
		handled: func(ctx context.Context, m inbox.Message) error {
			_, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, insert, m.ID, string(m.Payload))
				return err
			})
			return err
		},
	}
}

// consumerPool returns a pool of the test database with room for 8
// consumers (testdb's holds 4 connections on 2 cores).
func consumerPool(b *testing.B) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testdb.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// fillPostgres gives the inbox n records a day old, whose ids sort before
// any UUIDv7 of today, as older events' ids do.
func fillPostgres(b *testing.B, pool *pgxpool.Pool, table outbox.Table, n int) {
	if n == 0 {
		return
	}
	ctx := context.Background()
	ident := pgx.Identifier{table.Schema, inbox.DefaultTable}.Sanitize()
	if _, err := pool.Exec(ctx, "INSERT INTO "+ident+` (consumer, event_id, topic, received_at)
SELECT $1, lpad(to_hex(n), 32, '0')::uuid, 'orders', now() - interval '1 day'
FROM generate_series(1, $2::int) AS n`, benchConsumer, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+ident); err != nil {
		b.Fatal(err)
	}
}

// openMariaDB is openPostgres on MariaDB.
func openMariaDB(b *testing.B, records int) benchDB {
	ctx := context.Background()
	db, _ := mariadbtest.DB(b)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_id   BINARY(16)   NOT NULL,
    payload    VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB`); err != nil {
		b.Fatal(err)
	}
	if _, err := migrations.UpMySQLInbox(ctx, db, outbox.Table{}); err != nil {
		b.Fatal(err)
	}
	in := newTestInbox(b, inbox.Config{Consumer: benchConsumer, MySQL: true})
	fillMariaDB(b, db, records)
	const insert = "INSERT INTO effects (event_id, payload) VALUES (?, ?)"
	return benchDB{
		plain: func(ctx context.Context, m inbox.Message) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck // no-op after Commit
			if _, err := tx.ExecContext(ctx, insert, m.ID[:], string(m.Payload)); err != nil {
				return err
			}
			return tx.Commit()
		},
		handled: func(ctx context.Context, m inbox.Message) error {
			_, err := in.HandleSQL(ctx, db, m, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, insert, m.ID[:], string(m.Payload))
				return err
			})
			return err
		},
	}
}

// fillMariaDB is fillPostgres on MariaDB, from its Sequence engine.
func fillMariaDB(b *testing.B, db *sql.DB, n int) {
	if n == 0 {
		return
	}
	if _, err := db.Exec(fmt.Sprintf(`INSERT INTO inbox (consumer, event_id, topic, received_at)
SELECT ?, UNHEX(LPAD(HEX(seq), 32, '0')), 'orders', UTC_TIMESTAMP(6) - INTERVAL 1 DAY
FROM seq_1_to_%d`, n), benchConsumer); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec("ANALYZE TABLE inbox"); err != nil {
		b.Fatal(err)
	}
}

func newTestInbox(tb testing.TB, cfg inbox.Config) *inbox.Inbox {
	tb.Helper()
	in, err := inbox.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return in
}

// BenchmarkInboxPrune measures Prune on an inbox of 1,000,000 records a
// day old: rows deleted per second.
//
//	go test ./inbox -run '^$' -bench InboxPrune -benchtime 1x
func BenchmarkInboxPrune(b *testing.B) {
	ctx := context.Background()
	b.Run("db=postgres", func(b *testing.B) {
		pool, table := testdb.NewEmpty(b)
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{table.Schema}.Sanitize()); err != nil {
			b.Fatal(err)
		}
		t := outbox.Table{Schema: table.Schema}
		if _, err := migrations.UpInbox(ctx, pool, t); err != nil {
			b.Fatal(err)
		}
		in := newTestInbox(b, inbox.Config{Consumer: benchConsumer, Table: t})
		benchPrune(b, func() { fillPostgres(b, pool, t, bigInbox) }, func() (int64, error) { return in.Prune(ctx, pool, time.Hour) })
	})
	b.Run("db=mariadb", func(b *testing.B) {
		db, _ := mariadbtest.DB(b)
		if _, err := migrations.UpMySQLInbox(ctx, db, outbox.Table{}); err != nil {
			b.Fatal(err)
		}
		in := newTestInbox(b, inbox.Config{Consumer: benchConsumer, MySQL: true})
		benchPrune(b, func() { fillMariaDB(b, db, bigInbox) }, func() (int64, error) { return in.Prune(ctx, outbox.FromSQL(db), time.Hour) })
	})
}

// benchPrune fills the inbox and prunes it b.N times, timing the prunes.
func benchPrune(b *testing.B, fill func(), prune func() (int64, error)) {
	var deleted int64
	var spent time.Duration
	for range b.N {
		fill()
		start := time.Now()
		n, err := prune()
		if err != nil {
			b.Fatal(err)
		}
		spent += time.Since(start)
		if n != bigInbox {
			b.Fatalf("Prune deleted %d records, want %d", n, bigInbox)
		}
		deleted += n
	}
	b.ReportMetric(float64(deleted)/spent.Seconds(), "rows/s")
	b.ReportMetric(0, "ns/op") // the fills dominate ns/op; rows/s is the figure
}

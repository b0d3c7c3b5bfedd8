package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// consumerDB is a consumer's database for one test: the inbox table, an
// effects table without a unique key (so that a double effect shows as two
// rows), and the ways to apply an effect through the inbox.
type consumerDB struct {
	name    string
	in      *inbox.Inbox
	handle  func(ctx context.Context, m inbox.Message, apply func() error) (bool, error)
	effects func(t *testing.T, id uuid.UUID) int
	// exec runs a statement on the database (Prune's and Forget's db).
	exec outbox.Executor
	// waiters counts the sessions waiting for a row lock on the inbox.
	waiters func(t *testing.T) int
	cfg     inbox.Config
}

// inbox returns another consumer's inbox in c's table.
func (c *consumerDB) inbox(t *testing.T, consumer string) *inbox.Inbox {
	t.Helper()
	cfg := c.cfg
	cfg.Consumer = consumer
	in, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// newPostgres migrates an inbox in a fresh schema; viaSQL applies effects
// through HandleSQL on database/sql (pgx's stdlib driver) instead of
// Handle on pgx.
func newPostgres(t *testing.T, consumer string, viaSQL bool) *consumerDB {
	t.Helper()
	ctx := context.Background()
	pool, table := testdb.NewEmpty(t)
	table.Name = inbox.DefaultTable
	if _, err := migrations.UpInbox(ctx, pool, table); err != nil {
		t.Fatalf("migrate inbox: %v", err)
	}
	effects := pgx.Identifier{table.Schema, "effects"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+effects+" (event_id uuid NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg := inbox.Config{Consumer: consumer, Table: table}
	in, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &consumerDB{name: "postgres", in: in, exec: pool, cfg: cfg}
	c.handle = func(ctx context.Context, m inbox.Message, apply func() error) (bool, error) {
		return in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+effects+" (event_id) VALUES ($1)", m.ID); err != nil {
				return err
			}
			return apply()
		})
	}
	if viaSQL {
		c.name = "postgres-database/sql"
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close() })
		c.handle = func(ctx context.Context, m inbox.Message, apply func() error) (bool, error) {
			return in.HandleSQL(ctx, db, m, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO "+effects+" (event_id) VALUES ($1)", m.ID); err != nil {
					return err
				}
				return apply()
			})
		}
	}
	c.effects = func(t *testing.T, id uuid.UUID) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+effects+" WHERE event_id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	c.waiters = func(t *testing.T) int {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, table.Schema).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return c
}

// newMariaDB migrates an inbox in a fresh MariaDB database.
func newMariaDB(t *testing.T, consumer string) *consumerDB {
	t.Helper()
	ctx := context.Background()
	db, _ := mariadbtest.DB(t)
	var schema string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	table := outbox.Table{Schema: schema}
	if _, err := migrations.UpMySQLInbox(ctx, db, table); err != nil {
		t.Fatalf("migrate inbox: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (event_id BINARY(16) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg := inbox.Config{Consumer: consumer, Table: table, MySQL: true}
	in, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &consumerDB{name: "mariadb", in: in, exec: outbox.FromMySQL(db), cfg: cfg}
	c.handle = func(ctx context.Context, m inbox.Message, apply func() error) (bool, error) {
		return in.HandleSQL(ctx, db, m, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO effects (event_id) VALUES (?)", m.ID[:]); err != nil {
				return err
			}
			return apply()
		})
	}
	c.effects = func(t *testing.T, id uuid.UUID) int {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM effects WHERE event_id = ?", id[:]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	c.waiters = func(t *testing.T) int {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.INNODB_TRX t
			JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
			WHERE t.trx_state = 'LOCK WAIT' AND p.DB = ?`, schema).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	return c
}

// eachDatabase runs test against PostgreSQL through pgx and through
// database/sql, and against MariaDB.
func eachDatabase(t *testing.T, test func(t *testing.T, newDB func(t *testing.T, consumer string) *consumerDB)) {
	for _, db := range []struct {
		name  string
		newDB func(t *testing.T, consumer string) *consumerDB
	}{
		{"postgres", func(t *testing.T, c string) *consumerDB { return newPostgres(t, c, false) }},
		{"postgres-database-sql", func(t *testing.T, c string) *consumerDB { return newPostgres(t, c, true) }},
		{"mariadb", newMariaDB},
	} {
		t.Run(db.name, func(t *testing.T) { test(t, db.newDB) })
	}
}

func message() inbox.Message {
	return inbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte("{}")}
}

func noop() error { return nil }

func TestHandleAppliesAnEventOnce(t *testing.T) {
	eachDatabase(t, func(t *testing.T, newDB func(*testing.T, string) *consumerDB) {
		c := newDB(t, "billing")
		ctx := context.Background()
		m := message()
		for i, wantDup := range []bool{false, true, true} {
			dup, err := c.handle(ctx, m, noop)
			if err != nil || dup != wantDup {
				t.Fatalf("delivery %d: duplicate %v, err %v; want duplicate %v", i+1, dup, err, wantDup)
			}
		}
		if n := c.effects(t, m.ID); n != 1 {
			t.Fatalf("%d effects after three deliveries, want 1", n)
		}
	})
}

func TestHandleFailureRecordsNothing(t *testing.T) {
	eachDatabase(t, func(t *testing.T, newDB func(*testing.T, string) *consumerDB) {
		c := newDB(t, "billing")
		ctx := context.Background()
		m := message()
		boom := errors.New("boom")
		if _, err := c.handle(ctx, m, func() error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("err %v, want boom", err)
		}
		if n := c.effects(t, m.ID); n != 0 {
			t.Fatalf("%d effects after a failed delivery, want 0", n)
		}
		if dup, err := c.handle(ctx, m, noop); dup || err != nil {
			t.Fatalf("redelivery: duplicate %v, err %v; want applied", dup, err)
		}
		if n := c.effects(t, m.ID); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

func TestConsumersSharingATableAreIndependent(t *testing.T) {
	eachDatabase(t, func(t *testing.T, newDB func(*testing.T, string) *consumerDB) {
		c := newDB(t, "billing")
		other := c.inbox(t, "shipping")
		ctx := context.Background()
		m := message()
		if dup, err := c.handle(ctx, m, noop); dup || err != nil {
			t.Fatalf("billing: duplicate %v, err %v", dup, err)
		}
		dup, err := other.Record(ctx, c.exec, m)
		if dup || err != nil {
			t.Fatalf("shipping after billing: duplicate %v, err %v; want a first delivery", dup, err)
		}
	})
}

// TestRacingDeliveriesApplyOnce holds a first delivery inside its
// transaction, after its record and its effect, until a second delivery of
// the same event waits on the record's lock; then the first commits or
// fails. The second finds a duplicate, or applies the effect itself.
func TestRacingDeliveriesApplyOnce(t *testing.T) {
	eachDatabase(t, func(t *testing.T, newDB func(*testing.T, string) *consumerDB) {
		for _, firstFails := range []bool{false, true} {
			t.Run(fmt.Sprintf("first fails %v", firstFails), func(t *testing.T) {
				c := newDB(t, "billing")
				ctx := context.Background()
				m := message()
				boom := errors.New("boom")
				inside, release := make(chan struct{}), make(chan struct{})
				first := make(chan error, 1)
				go func() {
					_, err := c.handle(ctx, m, func() error {
						close(inside)
						<-release
						if firstFails {
							return boom
						}
						return nil
					})
					first <- err
				}()
				<-inside
				type result struct {
					dup bool
					err error
				}
				second := make(chan result, 1)
				go func() {
					dup, err := c.handle(ctx, m, noop)
					second <- result{dup, err}
				}()
				// Poll until the second delivery waits on the lock, less often
				// than every 100ms: InnoDB refreshes INNODB_TRX only when it
				// was not read for that long.
				for c.waiters(t) == 0 {
					select {
					case got := <-second:
						t.Fatalf("the second delivery did not wait for the first: duplicate %v, err %v", got.dup, got.err)
					case <-time.After(150 * time.Millisecond):
					}
				}
				close(release)
				if err := <-first; (err != nil) != firstFails {
					t.Fatalf("first delivery: %v", err)
				}
				got := <-second
				if got.err != nil || got.dup == firstFails {
					t.Fatalf("second delivery: duplicate %v, err %v; want duplicate %v", got.dup, got.err, !firstFails)
				}
				if n := c.effects(t, m.ID); n != 1 {
					t.Fatalf("%d effects, want 1", n)
				}
			})
		}
	})
}

// TestManyInstancesApplyEachEventOnce delivers each of 100 events to four
// instances of one consumer at once.
func TestManyInstancesApplyEachEventOnce(t *testing.T) {
	eachDatabase(t, func(t *testing.T, newDB func(*testing.T, string) *consumerDB) {
		c := newDB(t, "billing")
		ctx := context.Background()
		events := make([]inbox.Message, 100)
		for i := range events {
			events[i] = message()
		}
		const instances = 4
		var mu sync.Mutex
		applied, duplicates := 0, 0
		var wg sync.WaitGroup
		for range instances {
			wg.Go(func() {
				for _, m := range events {
					for {
						dup, err := c.handle(ctx, m, noop)
						if err != nil { // a deadlock or serialization failure: delivered again
							continue
						}
						mu.Lock()
						if dup {
							duplicates++
						} else {
							applied++
						}
						mu.Unlock()
						break
					}
				}
			})
		}
		wg.Wait()
		if applied != len(events) || duplicates != (instances-1)*len(events) {
			t.Fatalf("applied %d, duplicates %d; want %d and %d", applied, duplicates, len(events), (instances-1)*len(events))
		}
		for _, m := range events {
			if n := c.effects(t, m.ID); n != 1 {
				t.Fatalf("event %s: %d effects, want 1", m.ID, n)
			}
		}
	})
}

func TestForgetLetsAnEventApplyAgain(t *testing.T) {
	eachDatabase(t, func(t *testing.T, newDB func(*testing.T, string) *consumerDB) {
		c := newDB(t, "billing")
		ctx := context.Background()
		a, b, other := message(), message(), message()
		other.Topic = "orders.paid"
		since := time.Now().Add(-time.Minute)
		for _, m := range []inbox.Message{a, b, other} {
			if _, err := c.handle(ctx, m, noop); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := c.in.Forget(ctx, c.exec, a.ID, uuid.Must(uuid.NewV7())); n != 1 || err != nil {
			t.Fatalf("Forget: %d, %v; want 1 record", n, err)
		}
		if n, err := c.in.ForgetTopic(ctx, c.exec, "orders.created", time.Now().Add(time.Minute)); n != 0 || err != nil {
			t.Fatalf("ForgetTopic since a minute ahead: %d, %v; want nothing", n, err)
		}
		if n, err := c.in.ForgetTopic(ctx, c.exec, "orders.created", since); n != 1 || err != nil {
			t.Fatalf("ForgetTopic: %d, %v; want b's record", n, err)
		}
		for _, m := range []inbox.Message{a, b, other} {
			dup, err := c.handle(ctx, m, noop)
			if err != nil || dup != (m.ID == other.ID) {
				t.Fatalf("%s after forgetting: duplicate %v, err %v", m.Topic, dup, err)
			}
		}
	})
}

// TestPruneDeletesOnlyOldRecordsOfItsConsumer ages 25,000 records (more
// than one batch) of the consumer and one of another consumer, then prunes.
func TestPruneDeletesOnlyOldRecordsOfItsConsumer(t *testing.T) {
	eachDatabase(t, func(t *testing.T, newDB func(*testing.T, string) *consumerDB) {
		c := newDB(t, "billing")
		ctx := context.Background()
		recent := message()
		if _, err := c.handle(ctx, recent, noop); err != nil {
			t.Fatal(err)
		}
		other := c.inbox(t, "shipping")
		if _, err := other.Record(ctx, c.exec, message()); err != nil {
			t.Fatal(err)
		}
		table := c.cfg.Table.Ident()
		old := "INSERT INTO " + table + ` (consumer, event_id, topic, received_at)
			SELECT 'billing', gen_random_uuid(), 't', now() - interval '2 hours' FROM generate_series(1, 25000)`
		age := "UPDATE " + table + " SET received_at = now() - interval '2 hours' WHERE consumer = 'shipping'"
		if c.cfg.MySQL {
			table = "`" + c.cfg.Table.Schema + "`.`inbox`"
			old = "SET STATEMENT max_recursive_iterations = 30000 FOR INSERT INTO " + table + ` (consumer, event_id, topic, received_at)
				WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 25000)
				SELECT 'billing', UNHEX(REPLACE(UUID(), '-', '')), 't', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR FROM n`
			age = "UPDATE " + table + " SET received_at = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR WHERE consumer = 'shipping'"
		}
		for _, stmt := range []string{old, age} {
			if _, err := c.exec.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
		}
		if n, err := c.in.Prune(ctx, c.exec, time.Hour); n != 25000 || err != nil {
			t.Fatalf("Prune: %d, %v; want 25000", n, err)
		}
		if dup, err := c.handle(ctx, recent, noop); !dup || err != nil {
			t.Fatalf("the recent record was pruned: duplicate %v, err %v", dup, err)
		}
		if n, err := other.Prune(ctx, c.exec, time.Hour); n != 1 || err != nil {
			t.Fatalf("the other consumer's Prune: %d, %v; want its one old record", n, err)
		}
	})
}

// TestHandleContinuesTheWritersTrace: the span of Handle is the child of
// the message's traceparent, and the function's ctx carries it.
func TestHandleContinuesTheWritersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	pool, table := testdb.NewEmpty(t)
	table.Name = inbox.DefaultTable
	ctx := context.Background()
	if _, err := migrations.UpInbox(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Consumer: "billing", Table: table, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	m := message()
	m.Headers = map[string]string{outbox.HeaderTraceparent: "00-" + traceID + "-" + parentID + "-01"}
	var inner trace.SpanContext
	for range 2 {
		if _, err := in.Handle(ctx, pool, m, func(ctx context.Context, _ pgx.Tx) error {
			inner = trace.SpanContextFromContext(ctx)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, s := range spans {
		if s.Parent().TraceID().String() != traceID || s.Parent().SpanID().String() != parentID || s.SpanKind() != trace.SpanKindConsumer {
			t.Fatalf("span %d: parent %v, kind %v; want the writer's span as parent", i, s.Parent(), s.SpanKind())
		}
		dup := false
		for _, a := range s.Attributes() {
			if a.Key == inbox.AttrDuplicate {
				dup = a.Value.AsBool()
			}
		}
		if dup != (i == 1) {
			t.Fatalf("span %d: %s = %v", i, inbox.AttrDuplicate, dup)
		}
	}
	if inner.SpanID() != spans[0].SpanContext().SpanID() {
		t.Fatalf("the function's ctx holds span %v, want Handle's %v", inner.SpanID(), spans[0].SpanContext().SpanID())
	}
}

func TestInvalidInput(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("x", inbox.MaxConsumerLen+1), "a\xffb", "a\x00b"} {
		if _, err := inbox.New(inbox.Config{Consumer: name}); !errors.Is(err, inbox.ErrInvalidConsumer) {
			t.Errorf("consumer %q: %v, want ErrInvalidConsumer", name, err)
		}
	}
	if _, err := inbox.New(inbox.Config{Consumer: "c", Table: outbox.Table{Name: "bad name"}}); !errors.Is(err, outbox.ErrInvalidIdentifier) {
		t.Errorf("bad table name: %v", err)
	}
	in, err := inbox.New(inbox.Config{Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Record(context.Background(), nil, inbox.Message{}); !errors.Is(err, inbox.ErrNoEventID) {
		t.Errorf("Record of a message without id: %v", err)
	}
	for _, s := range []string{"", "not-a-uuid", "00000000-0000-0000-0000-000000000000"} {
		if _, err := inbox.ParseID(s); !errors.Is(err, inbox.ErrNoEventID) {
			t.Errorf("ParseID(%q): %v", s, err)
		}
	}
}

package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// bundle is what a test works with: its own schema with a migrated outbox
// table, a pool, a Writer for that table and a logger that reports to the
// test.
type bundle struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	table  outbox.Table
	writer *outbox.Writer
	log    *slog.Logger
}

// setup gives the test a fresh schema (dropped at the end) with the outbox
// table migrated.
func setup(t *testing.T) *bundle {
	t.Helper()
	pool, table := testdb.New(t)
	return bundleFor(t, pool, table)
}

// setupUnpartitioned is setup for tests of what only an unpartitioned
// table has (testdb.NewUnpartitioned).
func setupUnpartitioned(t *testing.T) *bundle {
	t.Helper()
	pool, table := testdb.NewUnpartitioned(t)
	return bundleFor(t, pool, table)
}

func bundleFor(t *testing.T, pool *pgxpool.Pool, table outbox.Table) *bundle {
	t.Helper()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &bundle{t: t, ctx: ctx, pool: pool, table: table, writer: w, log: testLogger(t)}
}

// testLogger sends slog output (info and worse: a failed test shows when
// its relays started) to t.Log until the test ends; later lines, from
// goroutines still winding down, are dropped.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// config fills the fields a test rarely cares about with values that keep
// tests fast: the test's table and logger, 10ms polls and short outage
// backoff. Fields the test set are kept.
func (b *bundle) config(cfg relay.Config) relay.Config {
	if cfg.Table == (outbox.Table{}) {
		cfg.Table = b.table
	}
	if cfg.Logger == nil {
		cfg.Logger = b.log
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 10 * time.Millisecond
	}
	if cfg.OutageBackoffMin == 0 {
		cfg.OutageBackoffMin = 10 * time.Millisecond
	}
	if cfg.OutageBackoffMax == 0 {
		cfg.OutageBackoffMax = 200 * time.Millisecond
	}
	return cfg
}

// newRelay builds a relay on the test's table; see config for the defaults.
func (b *bundle) newRelay(pub publishers.Publisher, cfg relay.Config) *relay.Relay {
	b.t.Helper()
	r, err := relay.New(b.pool, pub, b.config(cfg))
	if err != nil {
		b.t.Fatalf("relay.New: %v", err)
	}
	return r
}

// running is a relay whose Run executes in a goroutine.
type running struct {
	*relay.Relay
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startRelay runs a new relay until stop is called or the test ends.
func (b *bundle) startRelay(pub publishers.Publisher, cfg relay.Config) *running {
	b.t.Helper()
	r := b.newRelay(pub, cfg)
	ctx, cancel := context.WithCancel(b.ctx)
	rr := &running{Relay: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	b.t.Cleanup(func() {
		if err := rr.stop(b.t); err != nil {
			b.t.Errorf("relay %s: Run: %v", r.ID(), err)
		}
	})
	return rr
}

// stop cancels Run and returns its result; it fails the test when Run does
// not return within 30s. It is idempotent.
func (rr *running) stop(t testing.TB) error {
	t.Helper()
	rr.once.Do(func() {
		rr.cancel()
		select {
		case rr.err = <-rr.done:
		case <-time.After(30 * time.Second):
			rr.err = errors.New("Run did not return within 30s of cancellation")
		}
	})
	return rr.err
}

// await polls cond every 10ms until it holds, and fails the test with msg
// when timeout passes first.
func await(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, fmt.Sprintf(msg, args...))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sql replaces {{table}} with the quoted name of the test's outbox table.
func (b *bundle) sql(q string) string {
	return strings.ReplaceAll(q, "{{table}}", b.table.Ident())
}

// exec runs a statement against the test's table and returns rows affected.
func (b *bundle) exec(q string, args ...any) int64 {
	b.t.Helper()
	tag, err := b.pool.Exec(b.ctx, b.sql(q), args...)
	if err != nil {
		b.t.Fatalf("exec %q: %v", q, err)
	}
	return tag.RowsAffected()
}

// count returns the number of rows of the outbox table matching where.
func (b *bundle) count(where string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, b.sql("SELECT count(*) FROM {{table}} WHERE "+where), args...).Scan(&n); err != nil {
		b.t.Fatalf("count where %q: %v", where, err)
	}
	return n
}

// dbNow is the database clock, the only clock the relay trusts.
func (b *bundle) dbNow() time.Time {
	b.t.Helper()
	return dbNow(b.t, b.pool)
}

func dbNow(t testing.TB, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Errorf("read database clock: %v", err)
	}
	return now
}

// rowState is one outbox row as stored.
type rowState struct {
	ID          uuid.UUID
	Topic       string
	Key         []byte
	Payload     []byte
	Headers     string // JSON text
	Status      string
	Attempt     int
	NextRetryAt time.Time
	LockedBy    *string
	LockedUntil *time.Time
	LastError   *string
	CreatedAt   time.Time
	SentAt      *time.Time
	DedupKey    *string
}

const rowColumns = "id, topic, key, payload, headers::text, status, attempt, next_retry_at, locked_by, locked_until, last_error, created_at, sent_at, dedup_key"

func scanRow(r pgx.CollectableRow) (rowState, error) {
	var s rowState
	err := r.Scan(&s.ID, &s.Topic, &s.Key, &s.Payload, &s.Headers, &s.Status, &s.Attempt, &s.NextRetryAt,
		&s.LockedBy, &s.LockedUntil, &s.LastError, &s.CreatedAt, &s.SentAt, &s.DedupKey)
	return s, err
}

// row reads one row by id; it fails the test when there is none.
func (b *bundle) row(id uuid.UUID) rowState {
	b.t.Helper()
	rows := b.rows("id = $1", id)
	if len(rows) != 1 {
		b.t.Fatalf("row %s: found %d rows, want 1", id, len(rows))
	}
	return rows[0]
}

// rows reads the rows matching where, by id.
func (b *bundle) rows(where string, args ...any) []rowState {
	b.t.Helper()
	rs, err := b.pool.Query(b.ctx, b.sql("SELECT "+rowColumns+" FROM {{table}} WHERE "+where+" ORDER BY id"), args...)
	if err != nil {
		b.t.Fatalf("select rows where %q: %v", where, err)
	}
	out, err := pgx.CollectRows(rs, scanRow)
	if err != nil {
		b.t.Fatalf("select rows where %q: %v", where, err)
	}
	return out
}

// statuses counts rows by status when it is formatted: a message built
// before a wait (an await's arguments) shows the counts at its failure,
// not those before the wait.
func (b *bundle) statuses() fmt.Stringer { return statusCounts{b} }

type statusCounts struct{ b *bundle }

func (s statusCounts) String() string {
	m, err := s.b.countStatuses()
	if err != nil {
		return "(count statuses: " + err.Error() + ")"
	}
	return fmt.Sprint(m)
}

// countStatuses counts rows by status.
func (b *bundle) countStatuses() (map[string]int, error) {
	rs, err := b.pool.Query(b.ctx, b.sql("SELECT status, count(*) FROM {{table}} GROUP BY status"))
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	var status string
	var n int
	_, err = pgx.ForEachRow(rs, []any{&status, &n}, func() error { m[status] = n; return nil })
	return m, err
}

// write commits msgs in one transaction and returns their ids.
func (b *bundle) write(msgs ...outbox.Message) []uuid.UUID {
	b.t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		b.t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // no-op after commit
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		res, err := b.writer.Write(b.ctx, tx, m)
		if err != nil {
			b.t.Fatalf("Write #%d: %v", i, err)
		}
		if res.Duplicate {
			b.t.Fatalf("Write #%d: unexpectedly a duplicate", i)
		}
		ids[i] = res.ID
	}
	if err := tx.Commit(b.ctx); err != nil {
		b.t.Fatalf("commit: %v", err)
	}
	return ids
}

// writeN commits n messages to topic, payload "<prefix>-<i>", key "k<i%7>".
func (b *bundle) writeN(n int, topic, prefix string) []uuid.UUID {
	b.t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%7), Payload: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	return b.write(msgs...)
}

// sink is an in-test Publisher for relay logic. By default it acknowledges
// everything; fn, when set, decides the outcome of each call (and may
// block). It records every call and every acknowledged message.
type sink struct {
	fn func(ctx context.Context, msgs []outbox.Message) error

	mu    sync.Mutex
	calls [][]outbox.Message
	acked []outbox.Message
}

func (s *sink) Publish(ctx context.Context, msgs []outbox.Message) error {
	s.mu.Lock()
	s.calls = append(s.calls, append([]outbox.Message(nil), msgs...))
	fn := s.fn
	s.mu.Unlock()
	var err error
	if fn != nil {
		err = fn(ctx, msgs)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range publishers.PerMessage(err, len(msgs)) {
		if e == nil {
			s.acked = append(s.acked, msgs[i])
		}
	}
	return err
}

func (s *sink) Close() error { return nil }

// callCount is the number of Publish calls so far.
func (s *sink) callCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// call returns the messages of the i-th Publish call.
func (s *sink) call(i int) []outbox.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[i]
}

// ackedByID counts acknowledgements per event id.
func (s *sink) ackedByID() map[uuid.UUID]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[uuid.UUID]int{}
	for _, msg := range s.acked {
		m[msg.ID]++
	}
	return m
}

// ackedMessages returns a copy of the acknowledged messages.
func (s *sink) ackedMessages() []outbox.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]outbox.Message(nil), s.acked...)
}

// within reports whether d lies in [lo, hi].
func within(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }

// replicaOf strips the claim number from a locked_by value ("<id>#<n>").
func replicaOf(lockedBy *string) string {
	if lockedBy == nil {
		return ""
	}
	id, _, _ := strings.Cut(*lockedBy, "#")
	return id
}

// countActivity counts the server's sessions in pg_stat_activity matching
// where.
func (b *bundle) countActivity(where string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM pg_stat_activity WHERE "+where, args...).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

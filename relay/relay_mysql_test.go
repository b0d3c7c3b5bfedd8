package relay

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// recordingPublisher keeps the ids of the messages it was given, and the
// messages.
type recordingPublisher struct {
	mu   sync.Mutex
	seen map[string]int
	msgs []outbox.Message
}

func (p *recordingPublisher) Publish(_ context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.seen[m.ID.String()]++
	}
	p.msgs = append(p.msgs, msgs...)
	return nil
}

func (p *recordingPublisher) Close() error { return nil }

// Run on MariaDB: events written with outbox.FromMySQL reach the sink
// once each and are marked sent; two relays share the table without
// sending an event twice.
func TestRunOnMySQL(t *testing.T) {
	db := mysqlDB(t)
	ctx := context.Background()
	const n = 2000
	want := map[string]bool{}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", Key: []byte{byte(i % 7)}, Payload: []byte("p")}
	}
	res, err := outbox.WriteBatch(ctx, outbox.FromMySQL(tx), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		want[r.ID.String()] = true
	}

	pub := &recordingPublisher{seen: map[string]int{}}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		r, err := NewMySQL(db, pub, Config{ID: []string{"a", "b"}[i], BatchSize: 100, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.Run(runCtx)
		}()
	}
	deadline := time.Now().Add(60 * time.Second)
	for countStatus(t, db, "sent") < n && time.Now().Before(deadline) && len(errs) == 0 {
		time.Sleep(20 * time.Millisecond) // polls the table's state: nothing to await but the rows
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	if got := countStatus(t, db, "sent"); got != n {
		t.Fatalf("%d rows sent, want %d", got, n)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for id, times := range pub.seen {
		if !want[id] {
			t.Errorf("published %s, which was not written", id)
		}
		if times != 1 {
			t.Errorf("published %s %d times", id, times)
		}
	}
	if len(pub.seen) != n {
		t.Errorf("published %d distinct events, want %d", len(pub.seen), n)
	}
}

// Run on MariaDB publishes events written in plain SQL without an id
// (migration 004's default): each once, with the id the database made,
// a UUIDv7, and the key and payload written.
func TestRunOnMySQLPlainSQL(t *testing.T) {
	db := mysqlDB(t)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	for _, stmt := range []string{
		"INSERT INTO outbox (topic, `key`, payload) VALUES ('orders', 'k1', 'p0')",
		"INSERT INTO outbox (topic, `key`, payload) VALUES ('orders', 'k1', 'p1'), ('orders', 'k2', 'p2'), ('orders', NULL, 'p3')",
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	want := map[uuid.UUID]string{} // id: key/payload
	rows, err := db.QueryContext(ctx, "SELECT id, COALESCE(`key`, ''), payload FROM outbox")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id []byte
		var key, payload string
		if err := rows.Scan(&id, &key, &payload); err != nil {
			t.Fatal(err)
		}
		u, err := uuid.FromBytes(id)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("id %x made by the database: %v, version %d, variant %v; want a UUIDv7", id, err, u.Version(), u.Variant())
		}
		want[u] = key + "/" + payload
	}
	if err := rows.Err(); err != nil || len(want) != 4 {
		t.Fatalf("%d rows, %v; want 4", len(want), err)
	}

	pub := &recordingPublisher{seen: map[string]int{}}
	r, err := NewMySQL(db, pub, Config{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	deadline := time.Now().Add(60 * time.Second)
	for countStatus(t, db, "sent") < len(want) && time.Now().Before(deadline) && len(done) == 0 {
		time.Sleep(20 * time.Millisecond) // polls the table's state: nothing to await but the rows
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if got := countStatus(t, db, "sent"); got != len(want) {
		t.Fatalf("%d rows sent, want %d", got, len(want))
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.msgs) != len(want) {
		t.Fatalf("published %d messages, want %d", len(pub.msgs), len(want))
	}
	for _, m := range pub.msgs {
		if got := string(m.Key) + "/" + string(m.Payload); want[m.ID] != got || pub.seen[m.ID.String()] != 1 {
			t.Errorf("published %s %q %d times; the table holds %q", m.ID, got, pub.seen[m.ID.String()], want[m.ID])
		}
	}
}

// mysqlDB returns a migrated MariaDB/MySQL database of the test's own.
func mysqlDB(t *testing.T) *sql.DB {
	t.Helper()
	db, _ := mariadbtest.DB(t)
	if _, err := migrations.UpMySQL(context.Background(), db, outbox.Table{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

// countStatus counts the rows of the table in db with status.
func countStatus(t *testing.T, db *sql.DB, status string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM outbox WHERE status = ?", status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// What only PostgreSQL offers is refused on MySQL with ErrUnsupported.
func TestNewMySQLRefusesWhatOnlyPostgreSQLOffers(t *testing.T) {
	db := mysqlDB(t)
	for name, cfg := range map[string]Config{
		"lock claims": {Claim: ClaimLock},
	} {
		if _, err := NewMySQL(db, nopPublisher{}, cfg); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: NewMySQL = %v, want ErrUnsupported", name, err)
		}
	}
}

// Without LISTEN/NOTIFY a relay on MySQL polls adaptively, as one with
// NoListen on PostgreSQL: PollMin after a claim that found rows, the wait
// doubling after each that found none, up to PollInterval.
func TestMySQLRelayPollsAdaptively(t *testing.T) {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/none") // never connected
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := NewMySQL(db, nopPublisher{}, Config{PollMin: 5 * time.Millisecond, PollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.listener != nil {
		t.Error("a relay on MySQL listens for notifications")
	}
	if got := pollWait(r.cfg, r.listener != nil, time.Second, true); got != 5*time.Millisecond {
		t.Errorf("wait after a claim that found rows = %v, want PollMin (5ms)", got)
	}
	if got := pollWait(r.cfg, r.listener != nil, 40*time.Millisecond, false); got != 80*time.Millisecond {
		t.Errorf("wait after an empty claim = %v, want twice the previous (80ms)", got)
	}
	if got := pollWait(r.cfg, r.listener != nil, 800*time.Millisecond, false); got != time.Second {
		t.Errorf("wait after an empty claim = %v, want at most PollInterval (1s)", got)
	}
}

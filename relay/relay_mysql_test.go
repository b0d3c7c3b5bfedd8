package relay

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// recordingPublisher keeps the ids of the messages it was given.
type recordingPublisher struct {
	mu   sync.Mutex
	seen map[string]int
}

func (p *recordingPublisher) Publish(_ context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		p.seen[m.ID.String()]++
	}
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

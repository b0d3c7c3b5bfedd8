package relay

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

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
	b := setupMySQL(t, 30*time.Second)
	ctx := context.Background()
	const n = 2000
	want := map[string]bool{}
	tx, err := b.db.BeginTx(ctx, nil)
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
		r, err := NewMySQL(b.db, pub, Config{ID: []string{"a", "b"}[i], BatchSize: 100, PollInterval: 10 * time.Millisecond})
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
	for countStatus(t, b, "sent") < n && time.Now().Before(deadline) && len(errs) == 0 {
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
	if got := countStatus(t, b, "sent"); got != n {
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

func countStatus(t *testing.T, b *mysqlBundle, status string) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow("SELECT COUNT(*) FROM outbox WHERE status = ?", status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// What only PostgreSQL offers is refused on MySQL with ErrUnsupported.
func TestNewMySQLRefusesWhatOnlyPostgreSQLOffers(t *testing.T) {
	b := setupMySQL(t, 30*time.Second)
	for name, cfg := range map[string]Config{
		"ordered topics": {Ordering: Ordering{Topics: []string{"orders"}}},
		"lock claims":    {Claim: ClaimLock},
	} {
		if _, err := NewMySQL(b.db, nopPublisher{}, cfg); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: NewMySQL = %v, want ErrUnsupported", name, err)
		}
	}
}

// Backlog on MySQL counts rows by state through the status-led indexes,
// exactly up to the limit and by the server's estimate beyond it, and
// reports how long the oldest due row has waited.
func TestMySQLBacklog(t *testing.T) {
	b := setupMySQL(t, 30*time.Second)
	b.insert(5, "t", -time.Hour)   // pending, due an hour ago
	b.insert(3, "t", time.Hour)    // pending, delayed
	b.insert(4, "t", -time.Minute) // then processing
	b.exec("UPDATE outbox SET status = 'processing', locked_by = 'x#1', locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE next_retry_at BETWEEN UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE AND UTC_TIMESTAMP(6)")
	b.insert(2, "t", -time.Minute) // then failed
	b.exec("UPDATE outbox SET status = 'failed', failed_at = UTC_TIMESTAMP(6) WHERE status = 'pending' AND next_retry_at BETWEEN UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE AND UTC_TIMESTAMP(6)")
	b.insert(6, "t", -time.Minute) // then sent: never counted
	b.exec("UPDATE outbox SET status = 'sent', sent_at = UTC_TIMESTAMP(6) WHERE status = 'pending' AND next_retry_at BETWEEN UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE AND UTC_TIMESTAMP(6)")
	r, err := NewMySQL(b.db, nopPublisher{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := r.Backlog(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := Backlog{PendingDue: BacklogCount{Rows: 5}, PendingDelayed: BacklogCount{Rows: 3}, Processing: BacklogCount{Rows: 4}, Failed: BacklogCount{Rows: 2}}
	if got.PendingDue != want.PendingDue || got.PendingDelayed != want.PendingDelayed || got.Processing != want.Processing || got.Failed != want.Failed {
		t.Errorf("Backlog = %+v, want counts %+v", got, want)
	}
	if got.OldestDue < 59*time.Minute || got.OldestDue > 61*time.Minute {
		t.Errorf("OldestDue = %v, want about an hour", got.OldestDue)
	}
	capped, err := r.Backlog(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]BacklogCount{"pending due": capped.PendingDue, "pending delayed": capped.PendingDelayed, "processing": capped.Processing, "failed": capped.Failed} {
		if !c.Estimated || c.Rows < 2 {
			t.Errorf("%s with limit 2 = %+v, want an estimate of at least 2", name, c)
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

package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// runInBackground runs r until the test ends, then stops it and checks
// that Run returned no error.
func runInBackground(t *testing.T, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// events collects what an Observer is told.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) Observe(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// of returns the events of kind k.
func (e *events) of(k EventKind) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Event
	for _, ev := range e.all {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// sum adds up f over the events of kind k.
func (e *events) sum(k EventKind, f func(Event) int) int {
	n := 0
	for _, ev := range e.of(k) {
		n += f(ev)
	}
	return n
}

func rowsOf(ev Event) int { return ev.Rows }

// failingSink refuses every message as unavailable until up is set; it
// answers probes all along (a broker that is there but refuses writes).
type failingSink struct{ up atomic.Bool }

func (s *failingSink) Publish(context.Context, []outbox.Message) error {
	if s.up.Load() {
		return nil
	}
	return publishers.Unavailable(errors.New("connection refused"))
}

func (s *failingSink) Probe(context.Context) error { return nil }

func (s *failingSink) Close() error { return nil }

// The Observer is told of every claim, publish and recorded outcome, of an
// outage's start and end, and of the janitor's work, with counts that add
// up to the rows the relay moved.
func TestObserverSeesWhatTheRelayDoes(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	testdb.InsertPending(t, pool, table, 250)
	sink := &failingSink{}
	var seen events
	r := quietRelay(t, pool, sink, Config{Table: table, ProbeInterval: 10 * time.Millisecond, Retention: time.Millisecond,
		JanitorInterval: 50 * time.Millisecond, NoVacuum: true, Observer: &seen})
	runInBackground(t, r)

	deadline := time.Now().Add(20 * time.Second)
	for len(seen.of(EventOutageStarted)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no outage reported while the sink refused everything")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sink.up.Store(true)
	for seen.sum(EventRecorded, func(ev Event) int { return ev.Result.Sent }) < 250 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 250 rows reported sent", seen.sum(EventRecorded, func(ev Event) int { return ev.Result.Sent }))
		}
		time.Sleep(5 * time.Millisecond)
	}

	start, end := seen.of(EventOutageStarted), seen.of(EventOutageEnded)
	if len(start) != 1 || start[0].Err == "" || len(end) != 1 || end[0].Duration <= 0 || end[0].Rows == 0 {
		t.Errorf("outage reported as %+v then %+v; want one start with the error and one end with its length and deferred rows", start, end)
	}
	// Every row was claimed and published at least once; rows deferred by
	// the outage twice.
	deferred := end[0].Rows
	if got := seen.sum(EventClaimed, rowsOf); got != 250+deferred {
		t.Errorf("claims report %d rows, want 250 + %d deferred", got, deferred)
	}
	if got := seen.sum(EventPublished, rowsOf); got != 250+deferred {
		t.Errorf("publishes report %d messages, want 250 + %d deferred", got, deferred)
	}
	if got := seen.sum(EventRecorded, func(ev Event) int { return ev.Result.Retried }); got != deferred {
		t.Errorf("outcomes report %d rows retried, want the %d deferred", got, deferred)
	}
	for _, ev := range seen.of(EventClaimed) {
		if ev.Claim != ClaimLease || ev.Duration <= 0 {
			t.Fatalf("claim event %+v: want a lease claim with its duration", ev)
		}
	}

	// The janitor deletes the sent rows (Retention 1ms) and says so.
	for seen.sum(EventJanitorRan, rowsOf) < 250 {
		if time.Now().After(deadline) {
			t.Fatalf("janitor runs report %d rows deleted, want 250", seen.sum(EventJanitorRan, rowsOf))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := seen.sum(EventJanitorRan, rowsOf); got != 250 {
		t.Errorf("janitor runs report %d rows deleted, want 250", got)
	}
}

// Reporting to no Observer, or to one that does nothing, allocates nothing.
func TestObserveAllocatesNothing(t *testing.T) {
	for name, obs := range map[string]Observer{"none": nil, "no-op": ObserverFunc(func(Event) {})} {
		p := &pipeline{obs: obs}
		allocs := testing.AllocsPerRun(1000, func() {
			p.observe(Event{Kind: EventRecorded, Claim: ClaimLease, Rows: 100, Duration: time.Millisecond, Result: BatchResult{Claimed: 100, Sent: 100}})
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per event, want 0", name, allocs)
		}
	}
}

// Ordered batches are reported as such, and so are shard hand-backs.
func TestObserverSeesOrderedBatchesAndShards(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+table.Ident()+
		` (id, topic, key, payload) SELECT gen_random_uuid(), 'orders', convert_to('k' || (g % 7), 'UTF8'), '\x00' FROM generate_series(1, 60) g`); err != nil {
		t.Fatal(err)
	}
	var seen events
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, KeepSent: true, Observer: &seen,
		Ordering: Ordering{Topics: []string{"*"}, Shards: 2}})
	runInBackground(t, r)
	deadline := time.Now().Add(20 * time.Second)
	for seen.sum(EventRecorded, func(ev Event) int { return ev.Result.Sent }) < 60 {
		if time.Now().After(deadline) {
			t.Fatal("the ordered rows were not all reported sent")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := seen.sum(EventPublished, rowsOf); got != 60 {
		t.Errorf("publishes report %d messages, want 60", got)
	}
	for _, ev := range seen.of(EventRecorded) {
		if ev.Claim != ClaimOrdered {
			t.Fatalf("recorded event %+v, want an ordered batch", ev)
		}
	}
	for len(seen.of(EventShardHandedBack)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no shard hand-back reported")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := seen.sum(EventShardHandedBack, rowsOf); got == 0 {
		t.Error("shard hand-backs report no claimed rows")
	}
}

package relay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
)

// Liveness is nil before Run and while the loops wait or make progress,
// an error naming the loop when one is stuck inside a batch for longer
// than the stall bound, and ErrStopped once Run has returned.
func TestLiveness(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	// An observer that blocks the worker reporting the first claim that
	// found rows: the worker is stuck inside its batch.
	stuck := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	obs := ObserverFunc(func(e Event) {
		if e.Kind == EventClaimed && e.Rows > 0 {
			once.Do(func() {
				close(stuck)
				<-release
			})
		}
	})
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, KeepSent: true, Observer: obs, PollInterval: 20 * time.Millisecond})
	r.live.stall = 300 * time.Millisecond
	if err := r.Liveness(); err != nil {
		t.Fatalf("before Run: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	// alive waits until Liveness is nil. A claim or a write-back that a
	// busy machine makes slower than the stall bound is reported while it
	// runs; a loop that does not rest while it waits is reported for good.
	alive := func(when string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for err := r.Liveness(); err != nil; err = r.Liveness() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", when, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Idle for longer than the stall bound: alive.
	time.Sleep(2 * r.live.stall)
	alive("idle")
	testdb.InsertPending(t, pool, table, 3)
	<-stuck
	deadline := time.Now().Add(time.Minute)
	for r.Liveness() == nil {
		if time.Now().After(deadline) {
			t.Fatal("a worker stuck inside its batch was never reported")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.Liveness(); !strings.Contains(err.Error(), "worker") || !strings.Contains(err.Error(), "no progress") {
		t.Errorf("Liveness = %v, want it to name the stuck worker", err)
	}
	close(release)
	testdb.AwaitSent(t, pool, table, 3, 10*time.Second)
	alive("after the worker went on")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the deferred receive
	if err := r.Liveness(); !errors.Is(err, ErrStopped) {
		t.Errorf("after Run returned: %v, want ErrStopped", err)
	}
	if r.StallAfter() != r.live.stall {
		t.Errorf("StallAfter = %v, want %v", r.StallAfter(), r.live.stall)
	}
	d := quietRelay(t, pool, nopPublisher{}, Config{Table: table})
	if want := 2*30*time.Second + time.Minute + 10*time.Second + abandonAfter + stallSlack; d.StallAfter() != want {
		t.Errorf("default StallAfter = %v, want %v", d.StallAfter(), want)
	}
}

// Each ordered loop has a slot of its own after the workers', and a stall
// there names it.
func TestLivenessNamesAnOrderedLoop(t *testing.T) {
	t.Parallel()
	l := newLiveness(Config{Workers: 3, Ordering: Ordering{Loops: 4}, Lease: time.Second, PublishTimeout: time.Second})
	if len(l.loops) != 7 {
		t.Fatalf("%d slots for 3 workers and 4 ordered loops, want 7", len(l.loops))
	}
	if l.orderedSlot(0) != &l.loops[3] || l.orderedSlot(3) != &l.loops[6] {
		t.Fatal("ordered loop slots overlap the workers' or run past the end")
	}
	r := &Relay{live: l}
	l.state.Store(livenessRunning)
	l.orderedSlot(1).Store(time.Now().Add(-2 * l.stall).UnixNano())
	if err := r.Liveness(); err == nil || !strings.Contains(err.Error(), "ordered loop 1") {
		t.Errorf("Liveness = %v, want a stall naming ordered loop 1", err)
	}
	l.orderedSlot(1).Store(0)
	l.slot(2).Store(time.Now().Add(-2 * l.stall).UnixNano())
	if err := r.Liveness(); err == nil || !strings.Contains(err.Error(), "worker 2") {
		t.Errorf("Liveness = %v, want a stall naming worker 2", err)
	}
}

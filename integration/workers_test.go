package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// With Workers 2 a relay has two batches in flight at once, and still
// delivers every event exactly once.
func TestWorkersPublishBatchesSideBySide(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.writeN(400, "orders", "w")
	var inFlight, most atomic.Int32
	both := make(chan struct{})
	var closed atomic.Bool
	s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		if n >= 2 && closed.CompareAndSwap(false, true) {
			close(both)
		}
		// Each publish waits (briefly) for a second one to overlap it; a
		// single worker never gets one.
		select {
		case <-both:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	}}
	rr := b.startRelay(s, relay.Config{BatchSize: 50, Workers: 2})
	await(t, 20*time.Second, func() bool { return b.count("status = 'sent'") == len(ids) }, "not all sent: %v", b.statuses())
	if err := rr.stop(t); err != nil {
		t.Fatal(err)
	}
	if most.Load() < 2 {
		t.Fatalf("at most %d publishes in flight, want 2", most.Load())
	}
	for id, n := range s.ackedByID() {
		if n != 1 {
			t.Errorf("event %s acknowledged %d times", id, n)
		}
	}
	if got := len(s.ackedByID()); got != len(ids) {
		t.Fatalf("%d events acknowledged, want %d", got, len(ids))
	}
}

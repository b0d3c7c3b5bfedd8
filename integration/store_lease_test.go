package integration

import (
	"context"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// heldSink returns a sink whose Publish signals entered and then
// blocks until release is closed (and then acknowledges) or its context
// ends.
func heldSink() (sk *sink, entered chan struct{}, release chan struct{}) {
	entered, release = make(chan struct{}, 1), make(chan struct{})
	sk = &sink{fn: func(ctx context.Context, _ []outbox.Message) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	return sk, entered, release
}

// awaitEntered fails the test unless a publish starts within 10s.
func awaitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("relay never published")
	}
}

// Rows left processing by a claim whose lease lapsed (its relay "crashed"
// mid-publish) are claimed and sent by a new relay, on attempt 2; when the
// stale claim's publish returns after all, its write-back is fenced and
// changes nothing.
func TestStoresLapsedLeaseIsRescuedAndStaleClaimFenced(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		ctx := context.Background()
		ids := resultIDs(s.write(t, storeMessages(3, "orders", "rescue")...))

		// The "crashed" relay: its publish hangs, and its lease (a minute,
		// renewed only every 20s) is pushed into the past.
		staleSink, entered, release := heldSink()
		stale := s.newRelay(t, staleSink, relay.Config{ID: "stale", Lease: time.Minute})
		staleDone := make(chan relay.BatchResult, 1)
		go func() {
			res, err := stale.ProcessBatch(ctx, 0)
			if err != nil {
				t.Errorf("stale relay's ProcessBatch: %v", err)
			}
			staleDone <- res
		}()
		released := false
		t.Cleanup(func() {
			if !released {
				close(release)
				<-staleDone
			}
		})
		awaitEntered(t, entered)
		for id, r := range s.rows(t) {
			if r.Status != "processing" || r.Attempt != 1 || replicaOf(r.LockedBy) != "stale" || r.LeaseLeft == nil || *r.LeaseLeft < 30*time.Second {
				t.Fatalf("row %s while the stale claim publishes: %v; want processing, attempt 1, stale's minute-long lease", id, r)
			}
		}
		s.lapse(t, ids)

		rescuer := &sink{}
		live := startStoreRelay(t, s, rescuer, relay.Config{ID: "live"})
		await(t, 15*time.Second, func() bool { return countStatus(t, s, "sent") == len(ids) }, "lapsed rows not rescued: %v", s.statuses(t))
		acked := rescuer.ackedByID()
		rows := s.rows(t)
		for _, id := range ids {
			if acked[id] != 1 {
				t.Errorf("rescued row %s published %d times by the new relay, want 1", id, acked[id])
			}
			if r := rows[id]; r.Attempt != 2 || replicaOf(r.LockedBy) != live.ID() || !r.Sent || r.LeaseLeft != nil {
				t.Errorf("rescued row %s: %v; want sent by %s on attempt 2", id, r, live.ID())
			}
		}

		// The stale claim's publish returns: its write-back is fenced.
		released = true
		close(release)
		var res relay.BatchResult
		select {
		case res = <-staleDone:
		case <-time.After(15 * time.Second):
			t.Fatal("stale ProcessBatch did not return after its publish did")
		}
		if want := (relay.BatchResult{Claimed: 3, Fenced: 3}); res != want {
			t.Errorf("stale claim's ProcessBatch = %+v, want %+v (every write-back fenced)", res, want)
		}
		for id, r := range s.rows(t) {
			if r.Status != "sent" || r.Attempt != 2 || replicaOf(r.LockedBy) != live.ID() || r.LastError != nil {
				t.Errorf("row %s after the stale write-back: %v; want it as the rescuer left it", id, r)
			}
		}
	})
}

// Cancelling Run while a publish blocks past ShutdownTimeout releases the
// batch: its rows go back to pending at once with the attempt given back
// (not after the lease), and a new relay sends each of them once.
func TestStoresShutdownReleasesBlockedBatch(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		ids := resultIDs(s.write(t, storeMessages(5, "orders", "shutdown")...))
		blocked, entered, _ := heldSink()
		const shutdownTimeout = 300 * time.Millisecond
		first := startStoreRelay(t, s, blocked, relay.Config{ID: "first", ShutdownTimeout: shutdownTimeout})
		awaitEntered(t, entered)
		for id, r := range s.rows(t) {
			if r.Status != "processing" || r.Attempt != 1 || replicaOf(r.LockedBy) != "first" {
				t.Fatalf("row %s in flight: %v; want processing by first, attempt 1", id, r)
			}
		}
		start := time.Now()
		if err := first.stop(t); err != nil {
			t.Fatalf("Run returned %v on shutdown, want nil", err)
		}
		if took := time.Since(start); took < shutdownTimeout || took > shutdownTimeout+5*time.Second {
			t.Errorf("Run returned %v after cancellation, want about ShutdownTimeout (%v)", took, shutdownTimeout)
		}
		for id, r := range s.rows(t) {
			if r.Status != "pending" || r.Attempt != 0 || r.LeaseLeft != nil || r.DueIn > 0 || r.Sent {
				t.Errorf("row %s after shutdown: %v; want released: pending, due, attempt 0, no lease", id, r)
			}
		}

		second := &sink{}
		res, err := s.newRelay(t, second, relay.Config{ID: "second"}).ProcessBatch(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := (relay.BatchResult{Claimed: 5, Sent: 5}); res != want {
			t.Errorf("second relay's ProcessBatch = %+v, want %+v", res, want)
		}
		acked := second.ackedByID()
		rows := s.rows(t)
		for _, id := range ids {
			if acked[id] != 1 || rows[id].Status != "sent" || rows[id].Attempt != 1 {
				t.Errorf("row %s: acknowledged %d times by the second relay, %v; want once, sent on attempt 1", id, acked[id], rows[id])
			}
		}
	})
}

// Cancelling Run while a publish is in flight that then finishes within
// ShutdownTimeout records its outcome: the rows are sent, none is lost or
// released, and nothing is claimed after the cancellation.
func TestStoresShutdownRecordsFinishedBatch(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		ids := resultIDs(s.write(t, storeMessages(4, "orders", "finish")...))
		sk, entered, release := heldSink()
		rr := startStoreRelay(t, s, sk, relay.Config{ShutdownTimeout: 10 * time.Second})
		awaitEntered(t, entered)
		rr.cancel() // Run's context ends while the publish is in flight
		close(release)
		if err := rr.stop(t); err != nil {
			t.Fatalf("Run: %v", err)
		}
		rows := s.rows(t)
		for _, id := range ids {
			if r := rows[id]; r.Status != "sent" || !r.Sent || r.Attempt != 1 || r.LeaseLeft != nil {
				t.Errorf("row %s after a publish finished during shutdown: %v; want sent on attempt 1", id, r)
			}
		}
		if n := sk.callCount(); n != 1 {
			t.Errorf("sink called %d times, want 1 (no claim after cancellation)", n)
		}
		if acked := sk.ackedByID(); len(acked) != len(ids) {
			t.Errorf("%d events acknowledged, want %d", len(acked), len(ids))
		}
		for _, r := range rows {
			if r.LastError != nil {
				t.Errorf("row with last_error %q after a clean shutdown", *r.LastError)
			}
		}
	})
}

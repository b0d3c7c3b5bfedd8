package integration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
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

// awaitEntered fails the test unless a publish starts within a minute.
func awaitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(time.Minute):
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

		// The "crashed" relay: its publish hangs, and its lease (an hour,
		// renewed only every 20 minutes, so that no renewal undoes the
		// lapse however slow the machine) is pushed into the past.
		staleSink, entered, release := heldSink()
		stale := s.newRelay(t, staleSink, relay.Config{ID: "stale", Lease: time.Hour, PublishTimeout: time.Hour})
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
				t.Fatalf("row %s while the stale claim publishes: %v; want processing, attempt 1, stale's hour-long lease", id, r)
			}
		}
		s.lapse(t, ids, 0)

		// The rescuer claims the lapsed rows and holds them while the stale
		// claim's publish returns: the stale write-back finds the rows still
		// processing, under another claim, and must change nothing.
		rescuer, rescued, finish := heldSink()
		live := startStoreRelay(t, s, rescuer, relay.Config{ID: "live"})
		awaitEntered(t, rescued)
		before := s.rows(t)
		for _, id := range ids {
			if r := before[id]; r.Status != "processing" || r.Attempt != 2 || replicaOf(r.LockedBy) != live.ID() {
				t.Fatalf("rescued row %s: %v; want processing by %s on attempt 2", id, r, live.ID())
			}
		}
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
		after := s.rows(t)
		for _, id := range ids {
			if b, a := before[id], after[id]; a.Status != "processing" || a.Sent || a.LastError != nil || deref(a.LockedBy) != deref(b.LockedBy) || a.Attempt != b.Attempt || a.LeaseLeft == nil {
				t.Errorf("row %s after the stale write-back: %v; want it as the rescuer's claim left it: %v", id, a, b)
			}
		}

		close(finish)
		await(t, 15*time.Second, func() bool { return countStatus(t, s, "sent") == len(ids) }, "rescued rows not sent: %v", s.statuses(t))
		acked := rescuer.ackedByID()
		for id, r := range s.rows(t) {
			if acked[id] != 1 {
				t.Errorf("rescued row %s published %d times by the new relay, want 1", id, acked[id])
			}
			if r.Attempt != 2 || replicaOf(r.LockedBy) != live.ID() || !r.Sent || r.LeaseLeft != nil || r.LastError != nil {
				t.Errorf("rescued row %s: %v; want sent by %s on attempt 2", id, r, live.ID())
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
		// Without the cut the publish would run until PublishTimeout (1m).
		if took := time.Since(start); took < shutdownTimeout || took > shutdownTimeout+15*time.Second {
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

// While a slow publish is alive its relay extends the lease, so another
// relay cannot take the rows even after the first lease would have ended.
func TestStoresHeartbeatKeepsRowsOfSlowPublish(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		ctx := context.Background()
		ids := resultIDs(s.write(t, storeMessages(3, "orders", "slow")...))
		// Renewals come every lease/3; a lease of 3s leaves a busy machine
		// 2s to make each one in time.
		const lease = 3 * time.Second
		slow, entered, release := heldSink()
		a := s.newRelay(t, slow, relay.Config{ID: "slow", Lease: lease, PublishTimeout: time.Minute})
		done := make(chan relay.BatchResult, 1)
		go func() {
			res, _ := a.ProcessBatch(ctx, 0)
			done <- res
		}()
		released := false
		t.Cleanup(func() {
			if !released {
				close(release)
				<-done
			}
		})
		awaitEntered(t, entered)
		start := time.Now()

		// Another relay tries to claim over three lease lengths.
		other := &sink{}
		rb := s.newRelay(t, other, relay.Config{ID: "other", Lease: lease})
		await(t, time.Minute, func() bool {
			res, err := rb.ProcessBatch(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res.Claimed != 0 {
				t.Fatalf("second relay claimed %d rows of a live publish (the lease was not extended)", res.Claimed)
			}
			return time.Since(start) > 3*lease
		}, "the window did not pass")
		for _, id := range ids {
			if r := s.rows(t)[id]; r.Status != "processing" || replicaOf(r.LockedBy) != "slow" || r.LeaseLeft == nil || *r.LeaseLeft <= 0 {
				t.Errorf("row %s during a slow publish: %v; want processing by slow with a live lease", id, r)
			}
		}
		released = true
		close(release)
		if res := <-done; res != (relay.BatchResult{Claimed: 3, Sent: 3}) {
			t.Errorf("slow ProcessBatch = %+v, want 3 claimed and sent", res)
		}
		if n := countStatus(t, s, "sent"); n != 3 {
			t.Errorf("%d rows sent after the slow publish returned, want 3", n)
		}
	})
}

// A message with DeliverAt in the future is stored due then (read on the
// database clock) and is not claimed before, while the rest of its batch
// is delivered at once.
func TestStoresDelayedDelivery(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		const delay = 1500 * time.Millisecond
		deliverAt := time.Now().Add(delay)
		res := s.write(t,
			outbox.Message{Topic: "orders", Payload: []byte("later"), DeliverAt: deliverAt},
			outbox.Message{Topic: "orders", Payload: []byte("now")},
			outbox.Message{Topic: "orders", Payload: []byte("past"), DeliverAt: time.Now().Add(-time.Hour)},
		)
		later := res[0].ID
		// The host's clock is the database's: the due time is DeliverAt.
		// DueIn is read between readAt and readEnd, however long a busy
		// machine takes; 50ms allow for the database's rounding.
		readAt := time.Now()
		r := s.rows(t)[later]
		readEnd := time.Now()
		if lo, hi := deliverAt.Sub(readEnd)-50*time.Millisecond, deliverAt.Sub(readAt)+50*time.Millisecond; r.DueIn < lo || r.DueIn > hi {
			t.Fatalf("delayed row due in %v, want %v to %v (DeliverAt as read between two instants)", r.DueIn, lo, hi)
		}
		if d := s.rows(t)[res[2].ID].DueIn; d > -59*time.Minute {
			t.Errorf("row with DeliverAt an hour ago is due in %v, want about -1h", d)
		}

		var mu sync.Mutex
		publishedAt := map[uuid.UUID]time.Time{}
		sk := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				publishedAt[m.ID] = time.Now()
			}
			return nil
		}}
		startStoreRelay(t, s, sk, relay.Config{})
		await(t, time.Minute, func() bool { return countStatus(t, s, "sent") == 2 }, "undelayed rows not sent: %v", s.statuses(t))
		await(t, time.Minute, func() bool { return countStatus(t, s, "sent") == 3 }, "delayed row not sent: %v", s.statuses(t))
		mu.Lock()
		at := publishedAt[later]
		mu.Unlock()
		// readAt + DueIn is at or before the due time: DueIn was read after
		// readAt.
		if early := readAt.Add(r.DueIn).Sub(at); early > 50*time.Millisecond {
			t.Errorf("delayed row published %v before it was due", early)
		}
	})
}

// Whatever the outcome a claim writes back (sent, retry, failed, deferred
// for an outage, per-message results), it changes nothing on rows another
// claim took while the publish ran, and counts them as fenced; rows it
// still holds get their outcome.
func TestStoresFencedWriteBackChangesNothing(t *testing.T) {
	t.Parallel()
	outcomes := []struct {
		name string
		err  func(n int) error
	}{
		{"sent", func(int) error { return nil }},
		{"retry", func(int) error { return errors.New("transient") }},
		{"failed", func(int) error { return publishers.Permanent(errors.New("rejected")) }},
		{"deferred", func(int) error { return publishers.Unavailable(errors.New("down")) }},
		{"per-message", func(n int) error {
			errs := make(publishers.Errors, n)
			errs[0] = errors.New("transient")
			errs[1] = publishers.Permanent(errors.New("rejected"))
			return errs
		}},
	}
	forEachStore(t, func(t *testing.T, s storeBackend) {
		// Released on shutdown: the publish outlives ShutdownTimeout. First,
		// while the table holds no other row a running relay could take.
		t.Run("released", func(t *testing.T) {
			ids := resultIDs(s.write(t, storeMessages(3, "released", "fence")...))
			stolen := ids[:2]
			entered := make(chan struct{}, 1)
			sk := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
				if n := s.steal(t, stolen); n != len(stolen) {
					t.Errorf("stole %d rows, want %d", n, len(stolen))
				}
				entered <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}}
			rr := startStoreRelay(t, s, sk, relay.Config{BatchSize: 3, Workers: 1, ShutdownTimeout: 100 * time.Millisecond})
			awaitEntered(t, entered)
			if err := rr.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			rows := s.rows(t)
			for _, id := range stolen {
				if r := rows[id]; r.Status != "processing" || deref(r.LockedBy) != "other" || r.Attempt != 2 || r.LeaseLeft == nil {
					t.Errorf("stolen row %s after a fenced release: %v; want it as the thief left it", id, r)
				}
			}
			if r := rows[ids[2]]; r.Status != "pending" || r.Attempt != 0 || r.LeaseLeft != nil {
				t.Errorf("row still held by the claim after shutdown: %v; want released", r)
			}
			settle(t, s, stolen)
		})
		// Sent by Run, whose workers mark a published batch sent in their
		// next claim's transaction (sent_batching.go).
		t.Run("sent by Run", func(t *testing.T) {
			ids := resultIDs(s.write(t, storeMessages(3, "run", "fence")...))
			stolen := ids[:2]
			sk := &sink{fn: func(context.Context, []outbox.Message) error {
				if n := s.steal(t, stolen); n != len(stolen) {
					t.Errorf("stole %d rows, want %d", n, len(stolen))
				}
				return nil
			}}
			rr := startStoreRelay(t, s, sk, relay.Config{BatchSize: 3, Workers: 1})
			await(t, 10*time.Second, func() bool { return s.rows(t)[ids[2]].Status == "sent" }, "the row the claim kept was not marked sent: %v", s.rows(t)[ids[2]])
			if err := rr.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			rows := s.rows(t)
			for _, id := range stolen {
				if r := rows[id]; r.Status != "processing" || deref(r.LockedBy) != "other" || r.Attempt != 2 || r.Sent || r.LeaseLeft == nil {
					t.Errorf("stolen row %s after Run's fenced mark-sent: %v; want it as the thief left it", id, r)
				}
			}
			if r := rows[ids[2]]; r.Status != "sent" || r.Attempt != 1 {
				t.Errorf("row the claim kept: %v, want sent on attempt 1", r)
			}
			settle(t, s, stolen)
		})
		for _, tc := range outcomes {
			t.Run(tc.name, func(t *testing.T) {
				// Each outcome on rows of its own topic, claimed alone.
				ids := resultIDs(s.write(t, storeMessages(3, tc.name, "fence")...))
				stolen := ids[:2]
				sk := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
					if n := s.steal(t, stolen); n != len(stolen) {
						t.Errorf("stole %d rows, want %d", n, len(stolen))
					}
					return tc.err(len(msgs))
				}}
				// Retries wait an hour: no later case claims them.
				res, err := s.newRelay(t, sk, relay.Config{BatchSize: 3, BackoffMin: time.Hour, BackoffMax: 2 * time.Hour}).ProcessBatch(context.Background(), 0)
				if err != nil {
					t.Fatal(err)
				}
				if res.Claimed != 3 || res.Fenced != 2 {
					t.Errorf("ProcessBatch = %+v, want Claimed 3, Fenced 2", res)
				}
				rows := s.rows(t)
				for _, id := range stolen {
					if r := rows[id]; r.Status != "processing" || deref(r.LockedBy) != "other" || r.Attempt != 2 ||
						r.LastError != nil || r.Sent || r.LeaseLeft == nil || *r.LeaseLeft < 50*time.Second {
						t.Errorf("stolen row %s after a fenced write-back: %v; want it as the thief left it (processing, other, attempt 2, a minute's lease)", id, r)
					}
				}
				if r := rows[ids[2]]; r.Status == "processing" || deref(r.LockedBy) == "other" {
					t.Errorf("row still held by the claim got no outcome: %v", r)
				}
				settle(t, s, stolen)
			})
		}
	})
}

// settle ends a fencing case: it stops the test if the case failed, and
// otherwise lapses the stolen rows and sends every claimable row, so that
// the next case's claim takes only rows of its own.
func settle(t *testing.T, s storeBackend, stolen []uuid.UUID) {
	t.Helper()
	if t.Failed() {
		t.FailNow()
	}
	s.lapse(t, stolen, 0)
	if _, err := s.newRelay(t, &sink{}, relay.Config{MaxAttempts: 100}).ProcessBatch(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	for id, r := range s.rows(t) {
		if r.Status == "processing" || (r.Status == "pending" && r.DueIn <= 0) {
			t.Fatalf("row %s left claimable: %v", id, r)
		}
	}
}

// A lease that lapsed long before a running relay's claims look for
// lapsed leases (an hour ago: a replica that froze while the others ran)
// is found below the claims' window by the sweep and its rows are sent,
// once, on their second attempt.
func TestStoresLongLapsedLeaseFoundWhileRunning(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		ctx := context.Background()
		ids := resultIDs(s.write(t, storeMessages(4, "orders", "frozen")...))
		frozen, entered, release := heldSink()
		// A lease and a publish timeout of an hour: the stale relay renews
		// nothing and gives nothing back while the test runs, as a frozen
		// replica would not. (With a lease of a minute its renewal, every
		// 20s, undid the lapse before a sweep slowed by a busy machine
		// found it; its publish then timed out and gave the rows back.)
		stale := s.newRelay(t, frozen, relay.Config{ID: "frozen", Lease: time.Hour, PublishTimeout: time.Hour})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = stale.ProcessBatch(ctx, 0) // fenced once released: see the lapsed-lease case
		}()
		t.Cleanup(func() { close(release); <-done })
		awaitEntered(t, entered)

		sk := &sink{}
		live := startStoreRelay(t, s, sk, relay.Config{ID: "live"})
		// The live relay claims (nothing) for a while before the lease is
		// found lapsed an hour ago.
		more := resultIDs(s.write(t, storeMessages(2, "orders", "fresh")...))
		await(t, 10*time.Second, func() bool { return countStatus(t, s, "sent") == len(more) }, "fresh rows not sent: %v", s.statuses(t))
		lapsedAt := time.Now()
		s.lapse(t, ids, time.Hour)
		// Looks are at most a minute apart (claim_floor.go).
		// A safety net: looks are at most a minute apart, later on a busy
		// machine.
		await(t, 3*time.Minute, func() bool { return countStatus(t, s, "sent") == len(ids)+len(more) }, "long-lapsed rows not rescued: %v", s.statuses(t))
		t.Logf("%s: rows lapsed an hour ago rescued within %v", t.Name(), time.Since(lapsedAt))
		acked := sk.ackedByID()
		rows := s.rows(t)
		for _, id := range ids {
			if r := rows[id]; acked[id] != 1 || r.Attempt != 2 || replicaOf(r.LockedBy) != live.ID() {
				t.Errorf("long-lapsed row %s: published %d times, %v; want once, by %s on attempt 2", id, acked[id], r, live.ID())
			}
		}
	})
}

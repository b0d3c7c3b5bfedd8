package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// A transient sink error puts the row back to pending with attempt 1, the
// error text, and next_retry_at in the future by the backoff (BackoffMin
// ±50% on the database clock); the row is not claimed before then, and the
// next attempt, once due, sends it.
func TestStoresTransientFailureIsRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		ctx := context.Background()
		var failures atomic.Int32
		failures.Store(1)
		sk := &sink{fn: func(context.Context, []outbox.Message) error {
			if failures.Add(-1) >= 0 {
				return errors.New("broker said no: boom 42")
			}
			return nil
		}}
		const backoffMin = time.Second
		r := s.newRelay(t, sk, relay.Config{BackoffMin: backoffMin, BackoffMax: time.Minute, MaxAttempts: 5})
		id := s.write(t, outbox.Message{Topic: "orders", Payload: []byte("retry me")})[0].ID

		start := time.Now()
		res, err := r.ProcessBatch(ctx, 0)
		if err != nil {
			t.Fatalf("ProcessBatch: %v", err)
		}
		readFrom := time.Now() // DueIn is read after this
		row := s.rows(t)[id]
		took := time.Since(start) // bounds how long ago the write-back set next_retry_at
		if want := (relay.BatchResult{Claimed: 1, Retried: 1}); res != want {
			t.Fatalf("first ProcessBatch = %+v, want %+v", res, want)
		}
		if row.Status != "pending" || row.Attempt != 1 || row.LeaseLeft != nil || row.Sent {
			t.Fatalf("after a transient error: %v; want pending, attempt 1, no lease, not sent", row)
		}
		if row.LastError == nil || !strings.Contains(*row.LastError, "broker said no: boom 42") {
			t.Errorf("last_error = %v, want the sink's error text", deref(row.LastError))
		}
		// A busy machine may take longer than the backoff to read the row:
		// then lo is below 0, and so may DueIn be.
		if lo, hi := backoffMin/2-took-time.Millisecond, backoffMin*3/2; row.DueIn < lo || row.DueIn > hi {
			t.Errorf("next_retry_at is %v from now, want within [%v, %v]", row.DueIn, lo, hi)
		}

		// Not due yet: a claim takes nothing, unless the row fell due by then.
		res, err = r.ProcessBatch(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed != 0 && time.Since(readFrom) < row.DueIn-50*time.Millisecond {
			t.Fatalf("row claimed again before next_retry_at: %+v", res)
		}

		var second relay.BatchResult
		await(t, 10*time.Second, func() bool {
			second, err = r.ProcessBatch(ctx, 0)
			if err != nil {
				t.Fatalf("ProcessBatch: %v", err)
			}
			return second.Claimed > 0
		}, "retry never claimed")
		if want := (relay.BatchResult{Claimed: 1, Sent: 1}); second != want {
			t.Errorf("second ProcessBatch = %+v, want %+v", second, want)
		}
		if row := s.rows(t)[id]; row.Status != "sent" || row.Attempt != 2 || !row.Sent || row.LastError != nil {
			t.Errorf("after success: %v; want sent on attempt 2 with no last_error", row)
		}
		if n := sk.callCount(); n != 2 {
			t.Errorf("sink called %d times, want 2", n)
		}
	})
}

// A permanent error fails its row at once (attempt 1) and a row that keeps
// failing transiently fails at MaxAttempts, each with its reason in
// last_error, while a running relay goes on delivering the other rows,
// including those written after the failures, without crash-looping.
func TestStoresPermanentAndExhaustedRowsFail(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		const maxAttempts = 3
		written := resultIDs(s.write(t, storeMessages(6, "orders", "mixed")...))
		poison, doomed := written[1], written[4]
		var doomedCalls atomic.Int32
		sk := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
			errs := make(publishers.Errors, len(msgs))
			for i, m := range msgs {
				switch m.ID {
				case poison:
					errs[i] = publishers.Permanent(errors.New("message rejected by the sink"))
				case doomed:
					doomedCalls.Add(1)
					errs[i] = errors.New("kaput")
				}
			}
			return errs
		}}
		rr := startStoreRelay(t, s, sk, relay.Config{MaxAttempts: maxAttempts, BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond})

		await(t, 15*time.Second, func() bool {
			st := s.statuses(t)
			return st["failed"] == 2 && st["sent"] == 4
		}, "rows not settled: %v", s.statuses(t))
		rows := s.rows(t)
		if r := rows[poison]; r.Attempt != 1 || r.LastError == nil || !strings.Contains(*r.LastError, "message rejected by the sink") || r.Sent || r.LeaseLeft != nil {
			t.Errorf("permanently rejected row: %v; want failed on attempt 1 with the sink's reason", r)
		}
		if r := rows[doomed]; r.Attempt != maxAttempts || r.LastError == nil || !strings.Contains(*r.LastError, "kaput") ||
			!strings.Contains(*r.LastError, "attempt 3 of 3") || r.Sent || r.LeaseLeft != nil {
			t.Errorf("row failing every attempt: %v; want failed on attempt 3 with 'attempt 3 of 3: kaput'", r)
		}
		if n := doomedCalls.Load(); n != maxAttempts {
			t.Errorf("the failing row was published %d times, want %d", n, maxAttempts)
		}

		// The relay goes on: later rows are delivered by the same Run.
		later := resultIDs(s.write(t, storeMessages(3, "orders", "later")...))
		await(t, 15*time.Second, func() bool { return countStatus(t, s, "sent") == 7 }, "rows written after the failures not sent: %v", s.statuses(t))
		acked := sk.ackedByID()
		for _, id := range later {
			if acked[id] != 1 {
				t.Errorf("later row %s acknowledged %d times, want 1", id, acked[id])
			}
		}
		select {
		case err := <-rr.done:
			t.Fatalf("Run returned %v while rows failed; it must keep running", err)
		default:
		}
		if st := s.statuses(t); st["failed"] != 2 || st["pending"]+st["processing"] != 0 {
			t.Errorf("statuses %v, want 2 failed and nothing left", st)
		}
	})
}

// While the sink reports itself unavailable, rows are deferred without
// spending attempts (at most the one-row probe in flight shows one) and
// nothing is failed or sent; once it answers, every row is delivered on
// its first counted attempt, once.
func TestStoresSinkOutageBurnsNoAttempts(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		var down atomic.Bool
		down.Store(true)
		sk := &sink{fn: func(context.Context, []outbox.Message) error {
			if down.Load() {
				return publishers.Unavailable(errors.New("dial tcp 127.0.0.1:9092: connection refused"))
			}
			return nil
		}}
		written := resultIDs(s.write(t, storeMessages(20, "orders", "outage")...))
		// One worker, so that calls are counted one by one; MaxAttempts 2, so
		// that counted outage attempts would fail rows quickly.
		startStoreRelay(t, s, sk, relay.Config{BatchSize: 100, MaxAttempts: 2, Workers: 1,
			OutageBackoffMin: 10 * time.Millisecond, OutageBackoffMax: 50 * time.Millisecond})

		// Sampled after each of several probes during the outage.
		for calls := 4; calls <= 8; calls++ {
			await(t, 10*time.Second, func() bool { return sk.callCount() >= calls }, "relay did not probe the down sink (%d calls)", sk.callCount())
			inFlight := 0
			for id, r := range s.rows(t) {
				switch {
				case r.Status == "processing":
					inFlight++
					if r.Attempt > 1 {
						t.Fatalf("during the outage row %s is in flight with attempt %d: %v", id, r.Attempt, r)
					}
				case r.Status != "pending" || r.Attempt != 0:
					t.Fatalf("during the outage row %s: %v; want pending with no attempt spent", id, r)
				case r.LastError != nil && !strings.Contains(*r.LastError, "sink unavailable"):
					t.Fatalf("during the outage row %s records %q, not the outage", id, *r.LastError)
				}
			}
			if inFlight > 1 {
				t.Fatalf("%d rows in flight during the outage, want at most the probe", inFlight)
			}
		}
		if got := len(sk.call(0)); got != 20 {
			t.Errorf("first call published %d messages, want the whole batch of 20", got)
		}
		for i := 1; i < sk.callCount()-1; i++ {
			if got := len(sk.call(i)); got != 1 {
				t.Errorf("probe call %d carried %d messages, want 1", i, got)
			}
		}

		down.Store(false)
		await(t, 15*time.Second, func() bool { return countStatus(t, s, "sent") == len(written) }, "delivery did not resume: %v", s.statuses(t))
		acked := sk.ackedByID()
		rows := s.rows(t)
		for _, id := range written {
			if acked[id] != 1 {
				t.Errorf("row %s acknowledged %d times, want 1", id, acked[id])
			}
			if r := rows[id]; r.Attempt != 1 || r.LastError != nil || !r.Sent || r.LeaseLeft != nil {
				t.Errorf("row %s after the outage: %v; want sent on attempt 1 with no error", id, r)
			}
		}
	})
}

// Rows written by hand with malformed headers or topic go to failed with a
// reason naming the field, the good rows of the same batch are delivered,
// and the relay keeps running: one bad row never crash-loops it.
func TestStoresMalformedRowsFailWithReason(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		good := resultIDs(s.write(t, storeMessages(2, "orders", "good")...))
		bad := map[string]struct{ topic, headers, reason string }{
			"array headers":     {"orders", `[1,2]`, "headers"},
			"non-string values": {"orders", `{"a": 1}`, "headers"},
			"reserved header":   {"orders", `{"outbox-event-id": "forged"}`, "header"},
			"bad topic":         {"bad topic!", `{}`, "topic"},
		}
		badIDs := map[uuid.UUID]string{}
		for name, row := range bad {
			badIDs[s.insertRaw(t, row.topic, row.headers)] = name
		}

		sk := &sink{}
		rr := startStoreRelay(t, s, sk, relay.Config{BatchSize: 100})
		await(t, 10*time.Second, func() bool {
			st := s.statuses(t)
			return st["sent"]+st["failed"] == len(good)+len(bad)
		}, "batch not settled: %v", s.statuses(t))
		if got := len(sk.call(0)); got != len(good) {
			t.Errorf("first publish carried %d messages, want the %d good ones", got, len(good))
		}
		rows := s.rows(t)
		for _, id := range good {
			if r := rows[id]; r.Status != "sent" {
				t.Errorf("good row %s: %v, want sent", id, r)
			}
		}
		for id, name := range badIDs {
			r := rows[id]
			want := bad[name].reason
			if r.Status != "failed" || r.LastError == nil || !strings.Contains(*r.LastError, want) || !strings.Contains(*r.LastError, "malformed") {
				t.Errorf("%s row: %v; want failed with a reason naming %q", name, r, want)
			}
		}

		later := s.write(t, outbox.Message{Topic: "orders", Payload: []byte("after")})[0].ID
		await(t, 10*time.Second, func() bool { return s.rows(t)[later].Status == "sent" }, "relay stopped serving after malformed rows")
		select {
		case err := <-rr.done:
			t.Fatalf("Run returned %v", err)
		default:
		}
	})
}

// A row whose claimers keep dying (claimed MaxAttempts times, each lease
// lapsing with no outcome recorded) is a poison suspect: the next claim
// marks it failed with the reason instead of publishing it again, and
// sends the healthy row beside it.
func TestStoresRowRescuedTooOftenFails(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s storeBackend) {
		ctx := context.Background()
		poison := s.write(t, outbox.Message{Topic: "orders", Payload: []byte("poison")})[0].ID
		const maxAttempts = 2
		// Two claimers take the row in turn and "crash": each publish hangs
		// until the test ends, and each lease is pushed into the past.
		for i := range maxAttempts {
			hung, entered, release := heldSink()
			r := s.newRelay(t, hung, relay.Config{ID: fmt.Sprintf("dead-%d", i), MaxAttempts: maxAttempts, Lease: time.Minute})
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = r.ProcessBatch(ctx, 0) // fenced in the end: the row is failed by then
			}()
			t.Cleanup(func() { close(release); <-done })
			awaitEntered(t, entered)
			if row := s.rows(t)[poison]; row.Attempt != i+1 || row.Status != "processing" {
				t.Fatalf("claim %d: %v, want processing on attempt %d", i+1, row, i+1)
			}
			s.lapse(t, []uuid.UUID{poison}, 0)
		}
		healthy := s.write(t, outbox.Message{Topic: "orders", Payload: []byte("healthy")})[0].ID

		sk := &sink{}
		res, err := s.newRelay(t, sk, relay.Config{MaxAttempts: maxAttempts}).ProcessBatch(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := (relay.BatchResult{Claimed: 2, Sent: 1, Failed: 1}); res != want {
			t.Errorf("ProcessBatch = %+v, want %+v", res, want)
		}
		if r := s.rows(t)[poison]; r.Status != "failed" || r.Attempt != 3 || r.LastError == nil || !strings.Contains(*r.LastError, "attempt 3 exceeds max attempts 2") {
			t.Errorf("poison row: %v; want failed on attempt 3 with 'attempt 3 exceeds max attempts 2 ...'", r)
		}
		if acked := sk.ackedByID(); acked[poison] != 0 || acked[healthy] != 1 {
			t.Errorf("sink acknowledged %v; want only the healthy row", acked)
		}
	})
}

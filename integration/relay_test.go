package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// The relay-logic tests below use the in-test sink: the behaviour under test
// is the relay's bookkeeping in PostgreSQL, and a sink double makes the
// failure modes (fail N times, block, steal rows mid-publish) exact. The
// Kafka-facing behaviour is in kafka_test.go.

// testLease is the lease of relays whose claim time the tests reconstruct
// from locked_until: claim time = locked_until - lease, as long as no
// heartbeat (every lease/3) extended it.
const testLease = 30 * time.Second

// claimTimes reads, on the database clock, when this replica claimed ids:
// locked_until minus the lease. Sinks call it inside Publish, while the rows
// are still processing.
func claimTimes(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	rows, err := pool.Query(ctx, "SELECT id, locked_until FROM "+table.Ident()+" WHERE id = ANY($1) AND status = 'processing'", ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var id uuid.UUID
		var until time.Time
		if err := rows.Scan(&id, &until); err != nil {
			return nil, err
		}
		out[id] = until.Add(-testLease)
	}
	return out, rows.Err()
}

func ids(msgs []outbox.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// claimRecorder is a sink function that acknowledges everything and
// remembers each message's claim time and attempt.
type claimRecorder struct {
	b       *bundle
	mu      sync.Mutex
	claims  map[uuid.UUID]time.Time
	attempt map[uuid.UUID]int
	errs    []error
}

func newClaimRecorder(b *bundle) *claimRecorder {
	return &claimRecorder{b: b, claims: map[uuid.UUID]time.Time{}, attempt: map[uuid.UUID]int{}}
}

func (c *claimRecorder) publish(ctx context.Context, msgs []outbox.Message) error {
	at, err := claimTimes(ctx, c.b.pool, c.b.table, ids(msgs))
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errs = append(c.errs, err)
		return err
	}
	for _, m := range msgs {
		c.claims[m.ID] = at[m.ID]
		c.attempt[m.ID] = m.Attempt
	}
	return nil
}

func (c *claimRecorder) get(id uuid.UUID) (time.Time, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.errs {
		c.b.t.Errorf("claim recorder: %v", err)
	}
	return c.claims[id], c.attempt[id]
}

// A relay that claimed rows and died holds them only until its lease ends;
// then a live relay publishes them (attempt 2), and not a moment before.
func TestDeadRelaysRowsArePublishedAfterLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	written := b.writeN(5, "orders", "dead")

	// The dead relay claims exactly as a relay would and never finishes.
	if n := b.exec(`UPDATE {{table}}
SET status = 'processing',
    locked_by = 'dead-relay',
    locked_until = now() + interval '1500 milliseconds',
    attempt = attempt + 1
WHERE status = 'pending'`); n != 5 {
		t.Fatalf("dead relay claimed %d rows, want 5", n)
	}
	var leaseEnd time.Time
	if err := b.pool.QueryRow(b.ctx, b.sql("SELECT max(locked_until) FROM {{table}}")).Scan(&leaseEnd); err != nil {
		t.Fatal(err)
	}

	rec := newClaimRecorder(b)
	s := &sink{fn: rec.publish}
	live := b.startRelay(s, relay.Config{Lease: testLease})

	// Before the lease ends, the rows stay with the dead relay.
	if now := b.dbNow(); now.Before(leaseEnd.Add(-500 * time.Millisecond)) {
		time.Sleep(200 * time.Millisecond) // give the live relay several polls
		if n := b.count("status = 'processing' AND locked_by = 'dead-relay'"); n != 5 && b.dbNow().Before(leaseEnd) {
			t.Fatalf("%d rows left the dead relay before its lease ended", 5-n)
		}
	}

	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == 5 }, "rescued rows not sent: %v", b.statuses())
	for _, id := range written {
		claimedAt, attempt := rec.get(id)
		if claimedAt.Before(leaseEnd) {
			t.Errorf("row %s claimed at %v, before the dead relay's lease ended at %v", id, claimedAt, leaseEnd)
		}
		if attempt != 2 {
			t.Errorf("row %s published with Attempt %d, want 2", id, attempt)
		}
		r := b.row(id)
		if r.Attempt != 2 || replicaOf(r.LockedBy) != live.ID() || r.SentAt == nil || r.LockedUntil != nil {
			t.Errorf("row %s after rescue: attempt %d, locked_by %v, sent_at %v, locked_until %v; want 2, %s, set, NULL",
				id, r.Attempt, deref(r.LockedBy), r.SentAt, r.LockedUntil, live.ID())
		}
	}
	for id, n := range s.ackedByID() {
		if n != 1 {
			t.Errorf("row %s published %d times, want 1", id, n)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "NULL"
	}
	return *p
}

// A transient sink error puts the row back to pending with attempt 1, the
// error text and a backoff computed on the database clock; a later attempt,
// once due and not before, succeeds.
func TestTransientErrorIsRetriedWithBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newClaimRecorder(b)
	var failures atomic.Int32
	failures.Store(1)
	s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
		if err := rec.publish(ctx, msgs); err != nil {
			return err
		}
		if failures.Add(-1) >= 0 {
			return errors.New("broker said no: boom 42")
		}
		return nil
	}}
	const backoffMin = time.Second
	r := b.newRelay(s, relay.Config{Lease: testLease, BackoffMin: backoffMin, BackoffMax: time.Minute, MaxAttempts: 5})
	id := b.write(outbox.Message{Topic: "orders", Payload: []byte("retry me")})[0]

	res, err := r.ProcessBatch(b.ctx, 0)
	after := b.dbNow()
	if err != nil {
		t.Fatalf("ProcessBatch: %v", err)
	}
	if want := (relay.BatchResult{Claimed: 1, Retried: 1}); res != want {
		t.Fatalf("first ProcessBatch = %+v, want %+v", res, want)
	}
	claimed, _ := rec.get(id)
	row := b.row(id)
	if row.Status != "pending" || row.Attempt != 1 || row.LockedUntil != nil || row.SentAt != nil {
		t.Fatalf("after a transient error: status %s, attempt %d, locked_until %v, sent_at %v; want pending, 1, NULL, NULL",
			row.Status, row.Attempt, row.LockedUntil, row.SentAt)
	}
	if row.LastError == nil || !strings.Contains(*row.LastError, "broker said no: boom 42") {
		t.Errorf("last_error = %v, want the sink's error text", deref(row.LastError))
	}
	// First retry delay: BackoffMin ±50% (1ms slack for truncation to ms),
	// counted from the write-back, which happened between claim and after.
	lo, hi := backoffMin/2-time.Millisecond, backoffMin*3/2
	if d := row.NextRetryAt.Sub(claimed); d < lo {
		t.Errorf("next_retry_at is %v after the claim, want at least %v", d, lo)
	}
	if d := row.NextRetryAt.Sub(after); d > hi {
		t.Errorf("next_retry_at is %v after the write-back, want at most %v", d, hi)
	}

	// Not due yet: nothing to claim.
	res, err = r.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 0 && b.dbNow().Before(row.NextRetryAt) {
		t.Fatalf("row claimed again before next_retry_at: %+v", res)
	}

	var second relay.BatchResult
	await(t, 10*time.Second, func() bool {
		second, err = r.ProcessBatch(b.ctx, 0)
		if err != nil {
			t.Fatalf("ProcessBatch: %v", err)
		}
		return second.Claimed > 0
	}, "retry never claimed")
	if want := (relay.BatchResult{Claimed: 1, Sent: 1}); second != want {
		t.Errorf("second ProcessBatch = %+v, want %+v", second, want)
	}
	if claimed, attempt := rec.get(id); claimed.Before(row.NextRetryAt) || attempt != 2 {
		t.Errorf("retry claimed at %v with attempt %d; want not before next_retry_at %v, attempt 2", claimed, attempt, row.NextRetryAt)
	}
	row = b.row(id)
	if row.Status != "sent" || row.Attempt != 2 || row.SentAt == nil || row.LastError != nil {
		t.Errorf("after success: status %s, attempt %d, sent_at %v, last_error %v; want sent, 2, set, NULL",
			row.Status, row.Attempt, row.SentAt, deref(row.LastError))
	}
}

// A message that fails on every attempt is retried with growing, capped
// delays and marked failed, with the last error, at MaxAttempts.
func TestMaxAttemptsMarksFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newClaimRecorder(b)
	s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
		if err := rec.publish(ctx, msgs); err != nil {
			return err
		}
		return errors.New("kaput")
	}}
	const (
		maxAttempts = 3
		backoffMin  = 40 * time.Millisecond
		backoffMax  = 100 * time.Millisecond
	)
	r := b.newRelay(s, relay.Config{Lease: testLease, MaxAttempts: maxAttempts, BackoffMin: backoffMin, BackoffMax: backoffMax})
	id := b.write(outbox.Message{Topic: "orders", Payload: []byte("doomed")})[0]

	for attempt := 1; attempt <= maxAttempts; attempt++ {
		var res relay.BatchResult
		await(t, time.Minute, func() bool {
			var err error
			if res, err = r.ProcessBatch(b.ctx, 0); err != nil {
				t.Fatalf("ProcessBatch: %v", err)
			}
			return res.Claimed > 0
		}, "attempt %d never claimed", attempt)
		after := b.dbNow()
		row := b.row(id)
		if row.Attempt != attempt {
			t.Fatalf("attempt column = %d, want %d", row.Attempt, attempt)
		}
		if attempt < maxAttempts {
			if want := (relay.BatchResult{Claimed: 1, Retried: 1}); res != want {
				t.Errorf("attempt %d: ProcessBatch = %+v, want %+v", attempt, res, want)
			}
			if row.Status != "pending" || row.LastError == nil || *row.LastError != "kaput" {
				t.Errorf("attempt %d: status %s, last_error %v; want pending, kaput", attempt, row.Status, deref(row.LastError))
			}
			// Delay: BackoffMin doubled per attempt, ±50%, capped at BackoffMax.
			base := backoffMin << (attempt - 1)
			lo, hi := min(base/2, backoffMax)-time.Millisecond, min(base*3/2, backoffMax)
			claimed, _ := rec.get(id)
			if d := row.NextRetryAt.Sub(claimed); d < lo {
				t.Errorf("attempt %d: retry %v after the claim, want at least %v", attempt, d, lo)
			}
			if d := row.NextRetryAt.Sub(after); d > hi {
				t.Errorf("attempt %d: retry %v after the write-back, want at most %v", attempt, d, hi)
			}
			continue
		}
		if want := (relay.BatchResult{Claimed: 1, Failed: 1}); res != want {
			t.Errorf("last attempt: ProcessBatch = %+v, want %+v", res, want)
		}
		if row.Status != "failed" || row.LastError == nil || !strings.Contains(*row.LastError, "kaput") ||
			!strings.Contains(*row.LastError, "attempt 3 of 3") || row.SentAt != nil || row.LockedUntil != nil {
			t.Errorf("after max attempts: status %s, last_error %v, sent_at %v, locked_until %v; want failed, 'attempt 3 of 3: kaput', NULL, NULL",
				row.Status, deref(row.LastError), row.SentAt, row.LockedUntil)
		}
	}
	time.Sleep(2 * backoffMax) // long enough for any further retry to be due
	if res, err := r.ProcessBatch(b.ctx, 0); err != nil || res.Claimed != 0 {
		t.Errorf("failed row claimed again: %+v, %v", res, err)
	}
	if n := s.callCount(); n != maxAttempts {
		t.Errorf("sink called %d times, want %d", n, maxAttempts)
	}
}

// A per-message permanent error fails that message at once (attempt 1)
// while the rest of the batch is sent.
func TestPermanentErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	written := b.writeN(4, "orders", "perm")
	poison := written[2]
	s := &sink{fn: func(_ context.Context, msgs []outbox.Message) error {
		errs := make(publishers.Errors, len(msgs))
		for i, m := range msgs {
			if m.ID == poison {
				errs[i] = publishers.Permanent(errors.New("message rejected by the sink"))
			}
		}
		return errs
	}}
	r := b.newRelay(s, relay.Config{MaxAttempts: 10})
	res, err := r.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (relay.BatchResult{Claimed: 4, Sent: 3, Failed: 1}); res != want {
		t.Errorf("ProcessBatch = %+v, want %+v", res, want)
	}
	row := b.row(poison)
	if row.Status != "failed" || row.Attempt != 1 || row.LastError == nil || !strings.Contains(*row.LastError, "message rejected by the sink") {
		t.Errorf("poison row: status %s, attempt %d, last_error %v; want failed, 1, the sink's reason", row.Status, row.Attempt, deref(row.LastError))
	}
	if n := b.count("status = 'sent' AND sent_at IS NOT NULL AND attempt = 1"); n != 3 {
		t.Errorf("%d rows sent, want 3; statuses %v", n, b.statuses())
	}
}

// While the sink is down as a whole (publishers.Unavailable), rows are
// deferred without spending attempts and the relay probes with one row;
// once the sink answers, everything is delivered on its first counted
// attempt, once. In both claim modes: a lease claim's probe row shows its
// attempt while in flight; a lock claim writes nothing until the outcome.
func TestSinkOutageBurnsNoAttempts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode         relay.ClaimMode
		probeAttempt int // the most attempt a row shows during the outage
	}{
		{mode: relay.ClaimLease, probeAttempt: 1},
		{mode: relay.ClaimLock, probeAttempt: 0},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var down atomic.Bool
			down.Store(true)
			s := &sink{fn: func(context.Context, []outbox.Message) error {
				if down.Load() {
					return publishers.Unavailable(errors.New("dial tcp 127.0.0.1:9092: connection refused"))
				}
				return nil
			}}
			written := b.writeN(20, "orders", "outage")
			// One worker: the calls below are counted one by one. With more, a
			// worker that claimed just before another found the sink down
			// publishes its batch once more (deferred again, no attempt spent).
			b.startRelay(s, relay.Config{Claim: c.mode, BatchSize: 100, MaxAttempts: 2, Workers: 1,
				OutageBackoffMin: 10 * time.Millisecond, OutageBackoffMax: 50 * time.Millisecond})

			await(t, 10*time.Second, func() bool { return s.callCount() >= 6 }, "relay did not probe the down sink")
			// Sampled repeatedly during the outage: no attempt burned, nothing
			// retried, failed or sent; at most the probe row is in flight.
			for i := 0; i < 5; i++ {
				var burned, maxAttempt, withError, done int
				err := b.pool.QueryRow(b.ctx, b.sql(`SELECT
    count(*) FILTER (WHERE status = 'pending' AND attempt <> 0),
    coalesce(max(attempt), 0),
    count(*) FILTER (WHERE last_error NOT LIKE '%sink unavailable%'),
    count(*) FILTER (WHERE status IN ('sent', 'failed'))
FROM {{table}}`)).Scan(&burned, &maxAttempt, &withError, &done)
				if err != nil {
					t.Fatal(err)
				}
				if burned != 0 || maxAttempt > c.probeAttempt || withError != 0 || done != 0 {
					t.Fatalf("during the outage: %d pending rows with attempts, max attempt %d, %d with a last_error other than the outage, %d sent/failed; want 0, <=%d, 0, 0",
						burned, maxAttempt, withError, done, c.probeAttempt)
				}
				time.Sleep(20 * time.Millisecond) // spacing the samples over several probes
			}
			if got := len(s.call(0)); got != 20 {
				t.Errorf("first call published %d messages, want the whole batch of 20", got)
			}
			for i := 1; i < s.callCount()-1; i++ {
				if got := len(s.call(i)); got != 1 {
					t.Errorf("probe call %d carried %d messages, want 1", i, got)
				}
			}
			if k := b.count("last_error LIKE '%sink unavailable%' AND locked_by IS NOT NULL"); k == 0 {
				t.Errorf("no row records the outage and the claim that deferred it: %v", b.rows("true"))
			}

			down.Store(false)
			await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == 20 }, "delivery did not resume: %v", b.statuses())
			if n := b.count("attempt = 1 AND last_error IS NULL AND sent_at IS NOT NULL AND locked_until IS NULL"); n != 20 {
				t.Errorf("%d of 20 rows sent on attempt 1 without error; outage attempts were counted", n)
			}
			acked := s.ackedByID()
			for _, id := range written {
				if acked[id] != 1 {
					t.Errorf("row %s acknowledged %d times, want 1", id, acked[id])
				}
			}
		})
	}
}

// A write-back after the relay lost its lease changes nothing: another
// replica took the rows (as if the lease had expired) while Publish ran.
func TestFencedWriteBackChangesNothing(t *testing.T) {
	t.Parallel()
	outcomes := []struct {
		name string
		err  func(n int) error
	}{
		{"sent", func(int) error { return nil }},
		{"retry", func(int) error { return errors.New("transient") }},
		{"failed", func(int) error { return publishers.Permanent(errors.New("rejected")) }},
		{"deferred (sink down)", func(int) error { return publishers.Unavailable(errors.New("down")) }},
		{"per-message", func(n int) error {
			errs := make(publishers.Errors, n)
			errs[0] = errors.New("transient")
			errs[1] = publishers.Permanent(errors.New("rejected"))
			return errs
		}},
	}
	for _, tc := range outcomes {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			const n = 3
			written := b.writeN(n, "orders", "fence")
			var stolenUntil time.Time
			s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
				// Another replica claims the rows behind this relay's back.
				err := b.pool.QueryRow(ctx, b.sql(`UPDATE {{table}}
SET locked_by = 'other', locked_until = now() + interval '1 minute', attempt = attempt + 1
WHERE id = ANY($1)
RETURNING locked_until`), ids(msgs)[:n]).Scan(&stolenUntil)
				if err != nil {
					t.Errorf("steal rows: %v", err)
				}
				return tc.err(len(msgs))
			}}
			r := b.newRelay(s, relay.Config{})
			res, err := r.ProcessBatch(b.ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res.Claimed != n || res.Fenced != n {
				t.Errorf("ProcessBatch = %+v, want Claimed %d and Fenced %d", res, n, n)
			}
			for _, id := range written {
				row := b.row(id)
				if row.Status != "processing" || deref(row.LockedBy) != "other" || row.Attempt != 2 ||
					row.LastError != nil || row.SentAt != nil || row.LockedUntil == nil || !row.LockedUntil.Equal(stolenUntil) {
					t.Errorf("row %s after a fenced write-back: status %s, locked_by %v, attempt %d, last_error %v, sent_at %v, locked_until %v; want it untouched (processing, other, 2, NULL, NULL, %v)",
						id, row.Status, deref(row.LockedBy), row.Attempt, deref(row.LastError), row.SentAt, row.LockedUntil, stolenUntil)
				}
			}
		})
	}
	t.Run("partial", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		written := b.writeN(3, "orders", "fence")
		s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
			_, err := b.pool.Exec(ctx, b.sql("UPDATE {{table}} SET locked_by = 'other' WHERE id = $1"), msgs[0].ID)
			if err != nil {
				t.Errorf("steal row: %v", err)
			}
			return nil
		}}
		res, err := b.newRelay(s, relay.Config{}).ProcessBatch(b.ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed != 3 || res.Fenced != 1 {
			t.Errorf("ProcessBatch = %+v, want Claimed 3, Fenced 1", res)
		}
		if n := b.count("status = 'sent' AND locked_by <> 'other'"); n != 2 {
			t.Errorf("%d rows sent, want the 2 not stolen", n)
		}
		if n := b.count("status = 'processing' AND locked_by = 'other' AND id = $1", written[0]); n != 1 {
			t.Errorf("stolen row was touched: %+v", b.row(written[0]))
		}
	})
}

// A message with DeliverAt in the future is not claimed before that
// instant (database clock) and is delivered after it.
func TestDelayedDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deliverAt := b.dbNow().Add(1500 * time.Millisecond).Truncate(time.Microsecond)
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	delayed, err := b.writer.Write(b.ctx, tx, outbox.Message{Topic: "orders", Payload: []byte("later"), DeliverAt: deliverAt})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := b.writer.WriteBatch(b.ctx, tx, []outbox.Message{
		{Topic: "orders", Payload: []byte("batch later"), DeliverAt: deliverAt},
		{Topic: "orders", Payload: []byte("now")},
		{Topic: "orders", Payload: []byte("past"), DeliverAt: deliverAt.Add(-time.Hour)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	later := []uuid.UUID{delayed.ID, batch[0].ID}
	now := []uuid.UUID{batch[1].ID, batch[2].ID}
	for _, id := range later {
		if r := b.row(id); !r.NextRetryAt.Equal(deliverAt) {
			t.Errorf("row %s: next_retry_at %v, want DeliverAt %v", id, r.NextRetryAt, deliverAt)
		}
	}

	rec := newClaimRecorder(b)
	b.startRelay(&sink{fn: rec.publish}, relay.Config{Lease: testLease})
	await(t, time.Minute, func() bool { return b.count("status = 'sent' AND id = ANY($1)", now) == 2 }, "undelayed rows not sent")
	if n := b.count("status = 'pending' AND attempt = 0 AND id = ANY($1)", later); n != 2 && b.dbNow().Before(deliverAt) {
		t.Fatalf("delayed rows left pending before DeliverAt: %v", b.statuses())
	}
	await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == 4 }, "delayed rows not sent: %v", b.statuses())
	for _, id := range later {
		if claimed, attempt := rec.get(id); claimed.Before(deliverAt) || attempt != 1 {
			t.Errorf("delayed row %s claimed at %v (attempt %d), want not before %v (attempt 1)", id, claimed, attempt, deliverAt)
		}
	}
}

// On shutdown a publish in flight that does not finish within
// ShutdownTimeout is cut short, its rows go back to pending at once with
// the attempt given back, and another relay publishes them immediately.
func TestGracefulShutdownReleasesClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	written := b.writeN(5, "orders", "shutdown")
	entered := make(chan struct{}, 1)
	blocking := &sink{fn: func(ctx context.Context, _ []outbox.Message) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}}
	const shutdownTimeout = 300 * time.Millisecond
	first := b.startRelay(blocking, relay.Config{Lease: testLease, ShutdownTimeout: shutdownTimeout})
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("relay never published")
	}
	if n := b.count("status = 'processing' AND attempt = 1 AND regexp_replace(locked_by, '#[0-9]+$', '') = $1", first.ID()); n != 5 {
		t.Fatalf("%d rows in flight, want 5", n)
	}
	start := time.Now()
	if err := first.stop(t); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	// Without the cut the publish would run until PublishTimeout (1m).
	if took := time.Since(start); took < shutdownTimeout || took > shutdownTimeout+15*time.Second {
		t.Errorf("Run returned %v after cancellation, want about ShutdownTimeout (%v)", took, shutdownTimeout)
	}
	if n := b.count("status = 'pending' AND attempt = 0 AND locked_until IS NULL AND last_error IS NULL"); n != 5 {
		t.Fatalf("after shutdown %d of 5 rows released (pending, attempt 0, no lease): %v", n, b.rows("true"))
	}

	// Claimable at once, long before the 30s lease would have ended.
	s := &sink{}
	res, err := b.newRelay(s, relay.Config{}).ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (relay.BatchResult{Claimed: 5, Sent: 5}); res != want {
		t.Errorf("second relay's ProcessBatch = %+v, want %+v", res, want)
	}
	acked := s.ackedByID()
	for _, id := range written {
		if acked[id] != 1 {
			t.Errorf("row %s published %d times by the second relay, want 1", id, acked[id])
		}
	}
	if n := b.count("status = 'sent' AND attempt = 1"); n != 5 {
		t.Errorf("%d rows sent with attempt 1, want 5", n)
	}
}

// On shutdown a publish in flight that finishes within ShutdownTimeout has
// its outcome recorded: the rows are sent, not released.
func TestGracefulShutdownFinishesInFlightPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.writeN(3, "orders", "finish")
	entered, finish := make(chan struct{}, 1), make(chan struct{})
	s := &sink{fn: func(ctx context.Context, _ []outbox.Message) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	rr := b.startRelay(s, relay.Config{ShutdownTimeout: 10 * time.Second})
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("relay never published")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- rr.stop(t) }()
	time.Sleep(100 * time.Millisecond) // Run's ctx is cancelled; the publish is still running
	close(finish)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := b.count("status = 'sent' AND sent_at IS NOT NULL"); n != 3 {
		t.Errorf("%d of 3 rows sent after a publish finished during shutdown: %v", n, b.statuses())
	}
	if n := s.callCount(); n != 1 {
		t.Errorf("sink called %d times, want 1 (no claim after cancellation)", n)
	}
}

// Rows written by hand with malformed headers or topic go to failed with a
// reason naming the field; the good rows of the same batch are delivered and
// the relay keeps running.
func TestMalformedRowsFailWithReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.writeN(2, "orders", "good")
	bad := map[string]struct {
		topic, headers, reason string
	}{
		"array headers":     {"orders", `[1,2]`, "headers"},
		"non-string values": {"orders", `{"a": 1}`, "headers"},
		"reserved header":   {"orders", `{"outbox-event-id": "forged"}`, "header"},
		"bad topic":         {"bad topic!", `{}`, "topic"},
	}
	badIDs := map[uuid.UUID]string{}
	for name, row := range bad {
		id := uuid.Must(uuid.NewV7())
		b.exec("INSERT INTO {{table}} (id, topic, payload, headers) VALUES ($1, $2, 'x', $3::jsonb)", id, row.topic, row.headers)
		badIDs[id] = name
	}

	s := &sink{}
	rr := b.startRelay(s, relay.Config{BatchSize: 100})
	await(t, 10*time.Second, func() bool { return b.count("status IN ('sent', 'failed')") == 6 }, "batch not settled: %v", b.statuses())
	if got := len(s.call(0)); got != 2 {
		t.Errorf("first publish carried %d messages, want the 2 good ones", got)
	}
	for _, id := range good {
		if r := b.row(id); r.Status != "sent" {
			t.Errorf("good row %s: status %s, want sent", id, r.Status)
		}
	}
	for id, name := range badIDs {
		r := b.row(id)
		want := bad[name].reason
		if r.Status != "failed" || r.LastError == nil || !strings.Contains(*r.LastError, want) || !strings.Contains(*r.LastError, "malformed") {
			t.Errorf("%s row: status %s, last_error %v; want failed with a reason naming %q", name, r.Status, deref(r.LastError), want)
		}
	}

	// Still running: a new event goes through.
	later := b.writeN(1, "orders", "after")[0]
	await(t, 10*time.Second, func() bool { return b.row(later).Status == "sent" }, "relay stopped serving after malformed rows")
	select {
	case err := <-rr.done:
		t.Fatalf("Run returned %v", err)
	default:
	}
}

// A row whose relays keep dying (claimed MaxAttempts times, lease expired
// each time, no outcome ever recorded) is a poison suspect: the next claim
// marks it failed with the reason instead of publishing it again.
func TestRowRescuedTooOftenFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	poison := b.writeN(1, "orders", "poison")[0]
	healthy := b.writeN(1, "orders", "healthy")[0]
	b.exec(`UPDATE {{table}}
SET status = 'processing', locked_by = 'dead-relay', locked_until = now() - interval '1 second', attempt = 3
WHERE id = $1`, poison)
	s := &sink{}
	res, err := b.newRelay(s, relay.Config{MaxAttempts: 3}).ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (relay.BatchResult{Claimed: 2, Sent: 1, Failed: 1}); res != want {
		t.Errorf("ProcessBatch = %+v, want %+v", res, want)
	}
	row := b.row(poison)
	if row.Status != "failed" || row.Attempt != 4 || row.LastError == nil || !strings.Contains(*row.LastError, "attempt 4 exceeds max attempts 3") {
		t.Errorf("poison row: status %s, attempt %d, last_error %v; want failed, 4, 'attempt 4 exceeds max attempts 3 ...'", row.Status, row.Attempt, deref(row.LastError))
	}
	if acked := s.ackedByID(); acked[poison] != 0 || acked[healthy] != 1 {
		t.Errorf("sink acknowledged %v; want only the healthy row", acked)
	}
}

// While a slow publish is alive the heartbeat extends its lease, so a
// second relay cannot take the rows even after the original lease ended.
func TestHeartbeatKeepsRowsOfSlowPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	written := b.writeN(3, "orders", "slow")
	// Renewals come every lease/3; a lease of 3s leaves a busy machine 2s
	// to make each one in time.
	const lease = 3 * time.Second
	entered, release := make(chan struct{}), make(chan struct{})
	slow := &sink{fn: func(ctx context.Context, _ []outbox.Message) error {
		close(entered)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	a := b.newRelay(slow, relay.Config{Lease: lease, PublishTimeout: time.Minute})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = a.ProcessBatch(b.ctx, 0) // outcome: see TestSlowPublishWithinPublishTimeoutIsRecorded
	}()
	defer func() { <-done }()
	defer close(release)
	<-entered
	first := b.row(written[0]).LockedUntil

	other := &sink{}
	rb := b.newRelay(other, relay.Config{Lease: lease})
	end := time.Now().Add(3 * lease)
	for time.Now().Before(end) {
		res, err := rb.ProcessBatch(b.ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed != 0 {
			t.Fatalf("second relay claimed %d rows of a live publish (heartbeat did not extend the lease)", res.Claimed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range written {
		r := b.row(id)
		if r.Status != "processing" || replicaOf(r.LockedBy) != a.ID() || r.LockedUntil == nil || !r.LockedUntil.After(first.Add(lease)) {
			t.Errorf("row %s during a slow publish: status %s, locked_by %v, locked_until %v; want processing by %s, extended past %v",
				id, r.Status, deref(r.LockedBy), r.LockedUntil, a.ID(), first.Add(lease))
		}
	}
}

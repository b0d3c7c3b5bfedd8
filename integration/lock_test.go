package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Integration tests of lock claims (relay.ClaimLock): the claim locks its
// rows with SELECT ... FOR UPDATE SKIP LOCKED in a transaction that stays
// open while they are published, and the outcome is written in that
// transaction. The lease is the session's idle_in_transaction_session_timeout,
// renewed by a heartbeat (SELECT 1) every Lease/3.

// inFlight is a ProcessBatch running in a goroutine.
type inFlight struct {
	done chan struct{} // closed when ProcessBatch has returned
	res  relay.BatchResult
	err  error
}

// processInBackground runs r.ProcessBatch in a goroutine.
func processInBackground(ctx context.Context, r *relay.Relay) *inFlight {
	f := &inFlight{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.res, f.err = r.ProcessBatch(ctx, 0)
	}()
	return f
}

// wait waits up to timeout for ProcessBatch to return and reports whether
// it did; res and err are set once it has. It may be called again.
func (f *inFlight) wait(timeout time.Duration) bool {
	select {
	case <-f.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// blockingSink is a sink whose every Publish signals entered (once) and
// blocks until release is called, then acknowledges everything, or until
// its ctx ends. release may be called more than once.
func blockingSink() (s *sink, entered <-chan struct{}, release func()) {
	in, rel := make(chan struct{}), make(chan struct{})
	var enter, unblock sync.Once
	s = &sink{fn: func(ctx context.Context, _ []outbox.Message) error {
		enter.Do(func() { close(in) })
		select {
		case <-rel:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	return s, in, func() { unblock.Do(func() { close(rel) }) }
}

// finish releases a blocking sink and waits for the ProcessBatch publishing
// to it to return, so that no relay goroutine outlives the test.
func finish(t *testing.T, f *inFlight, release func()) {
	t.Helper()
	release()
	if !f.wait(30 * time.Second) {
		t.Error("ProcessBatch did not return within 30s of its sink's release")
	}
}

// waitEntered waits for a blocking sink to be entered, failing the test
// after a minute.
func waitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("relay never published")
	}
}

// A lock claim writes nothing before the outcome: while Publish runs the
// rows are unchanged (pending, attempt 0, no owner), yet locked, so that no
// other claim, lease or lock, takes them. The outcome of each row (sent,
// transient failure, permanent failure) is then recorded in one go, with
// the attempt counted and the claim's token in locked_by.
func TestLockClaimWritesNothingUntilTheOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	written := b.writeN(4, "orders", "lock")
	// Outcome by payload: 0 and 1 are acknowledged.
	const permanent, transient = "lock-2", "lock-3"
	leaseRival := b.newRelay(&sink{}, relay.Config{Claim: relay.ClaimLease})
	lockRival := b.newRelay(&sink{}, relay.Config{Claim: relay.ClaimLock})
	var checked atomic.Bool
	s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
		checked.Store(true)
		if len(msgs) != 4 {
			t.Errorf("Publish got %d messages, want the batch of 4", len(msgs))
		}
		var untouched int
		if err := b.pool.QueryRow(ctx, b.sql(`SELECT count(*) FROM {{table}}
WHERE status = 'pending' AND attempt = 0 AND locked_by IS NULL AND locked_until IS NULL AND last_error IS NULL`)).Scan(&untouched); err != nil {
			t.Errorf("read rows during Publish: %v", err)
		} else if untouched != 4 {
			t.Errorf("during Publish %d of 4 rows are untouched (pending, attempt 0, no owner): the lock claim wrote to them", untouched)
		}
		for name, rival := range map[string]*relay.Relay{"lease": leaseRival, "lock": lockRival} {
			res, err := rival.ProcessBatch(ctx, 0)
			if err != nil || res.Claimed != 0 {
				t.Errorf("a %s-mode relay claimed %+v (error %v) of rows locked by a claim in flight, want none", name, res, err)
			}
		}
		errs := make(publishers.Errors, len(msgs))
		for i, m := range msgs {
			switch string(m.Payload) {
			case permanent:
				errs[i] = publishers.Permanent(errors.New("schema rejected: field x"))
			case transient:
				errs[i] = errors.New("broker said no: boom 42")
			}
		}
		return errs
	}}
	r := b.newRelay(s, relay.Config{Claim: relay.ClaimLock, Lease: testLease, BackoffMin: 10 * time.Second, BackoffMax: time.Minute})
	res, err := r.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatalf("ProcessBatch: %v", err)
	}
	if !checked.Load() {
		t.Fatal("the sink was never called")
	}
	if want := (relay.BatchResult{Claimed: 4, Sent: 2, Retried: 1, Failed: 1}); res != want {
		t.Errorf("ProcessBatch = %+v, want %+v", res, want)
	}
	now := b.dbNow()
	for _, id := range written {
		row := b.row(id)
		if replicaOf(row.LockedBy) != r.ID() || row.LockedUntil != nil || row.Attempt != 1 {
			t.Errorf("row %s (%s): locked_by %v, locked_until %v, attempt %d; want %s#<n>, NULL, 1",
				id, row.Payload, deref(row.LockedBy), row.LockedUntil, row.Attempt, r.ID())
		}
		switch string(row.Payload) {
		case permanent:
			if row.Status != "failed" || row.SentAt != nil || row.LastError == nil || !strings.Contains(*row.LastError, "schema rejected: field x") {
				t.Errorf("permanently failed row: status %s, sent_at %v, last_error %v; want failed, NULL, the reason",
					row.Status, row.SentAt, deref(row.LastError))
			}
		case transient:
			if row.Status != "pending" || row.SentAt != nil || row.LastError == nil || !strings.Contains(*row.LastError, "broker said no: boom 42") {
				t.Errorf("retried row: status %s, sent_at %v, last_error %v; want pending, NULL, the error",
					row.Status, row.SentAt, deref(row.LastError))
			}
			// BackoffMin 10s ±50%: at least 5s from the write-back.
			if !row.NextRetryAt.After(now.Add(4 * time.Second)) {
				t.Errorf("retried row: next_retry_at %v is not in the future (now %v) by the backoff", row.NextRetryAt, now)
			}
		default:
			if row.Status != "sent" || row.SentAt == nil || row.LastError != nil {
				t.Errorf("acknowledged row %s: status %s, sent_at %v, last_error %v; want sent, set, NULL",
					row.Payload, row.Status, row.SentAt, deref(row.LastError))
			}
		}
	}
	got, err := b.countStatuses()
	if err != nil {
		t.Fatal(err)
	}
	if got["sent"] != 2 || got["pending"] != 1 || got["failed"] != 1 {
		t.Errorf("statuses %v, want 2 sent, 1 pending, 1 failed", got)
	}
}

// A relay that dies while publishing (its session ends: here the backend
// is terminated) frees its rows at once, not after the lease: another
// relay claims and sends them right away. The cut-short attempt is not
// counted (the documented trade-off of lock claims), and the dead claim's
// late write-back fails and changes nothing.
func TestLockClaimDeadRelaysRowsReturnAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 5
	written := b.writeN(n, "orders", "dead")
	s1, entered, release := blockingSink()
	first := b.newRelay(s1, relay.Config{Claim: relay.ClaimLock, Lease: time.Minute})
	dying := processInBackground(b.ctx, first)
	defer finish(t, dying, release)
	waitEntered(t, entered)

	// The first relay's session: idle in its claim's transaction, whose
	// last statement (the claim) names this test's schema. Other tests'
	// sessions never match.
	const mine = "state = 'idle in transaction' AND position($1 in query) > 0"
	await(t, 10*time.Second, func() bool { return b.countActivity(mine, b.table.Schema) == 1 },
		"no single session idle in transaction on schema %s", b.table.Schema)
	var pid int
	if err := b.pool.QueryRow(b.ctx, "SELECT pid FROM pg_stat_activity WHERE "+mine, b.table.Schema).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var terminated bool
	// With a timeout, pg_terminate_backend waits until the backend is gone
	// and its locks are released.
	if err := b.pool.QueryRow(b.ctx, "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, terminated, err)
	}
	killed := time.Now()
	// Nothing was written: the rows are as before the claim.
	if k := b.count("status = 'pending' AND attempt = 0 AND locked_by IS NULL AND locked_until IS NULL"); k != n {
		t.Fatalf("after the relay died %d of %d rows are untouched: %v", k, n, b.rows("true"))
	}

	s2 := &sink{}
	second := b.newRelay(s2, relay.Config{Claim: relay.ClaimLock, Lease: time.Minute})
	res, err := second.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatalf("second relay: %v", err)
	}
	if want := (relay.BatchResult{Claimed: n, Sent: n}); res != want {
		t.Fatalf("second relay's ProcessBatch = %+v, want %+v (the dead relay's rows at once)", res, want)
	}
	if took := time.Since(killed); took > 30*time.Second {
		t.Errorf("rows sent %v after the relay died, want at once (lease 1m)", took)
	}
	for _, m := range s2.ackedMessages() {
		if m.Attempt != 1 {
			t.Errorf("row %s published with Attempt %d, want 1 (the cut-short attempt is not counted)", m.ID, m.Attempt)
		}
	}

	// The dead claim's publish returns: recording its outcome fails.
	release()
	if !dying.wait(30 * time.Second) {
		t.Fatal("the dead relay's ProcessBatch did not return")
	}
	if dying.err == nil {
		t.Errorf("the dead relay's ProcessBatch = %+v, nil; want an error (its session is gone)", dying.res)
	}
	for _, id := range written {
		row := b.row(id)
		if row.Status != "sent" || row.Attempt != 1 || replicaOf(row.LockedBy) != second.ID() || row.SentAt == nil || row.LockedUntil != nil {
			t.Errorf("row %s: status %s, attempt %d, locked_by %v, sent_at %v, locked_until %v; want sent, 1, %s, set, NULL",
				id, row.Status, row.Attempt, deref(row.LockedBy), row.SentAt, row.LockedUntil, second.ID())
		}
	}
	acked := s2.ackedByID()
	for _, id := range written {
		if acked[id] != 1 {
			t.Errorf("row %s acknowledged %d times by the second relay, want 1", id, acked[id])
		}
	}
}

// proxiedPool returns a pool with the test pool's settings that reaches
// PostgreSQL through a faultproxy; both are closed when the test ends,
// the proxy first so that no connection waits on a stalled socket.
func proxiedPool(t *testing.T, b *bundle) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	cfg := b.pool.Config()
	proxy := testdb.Proxied(t, cfg)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(func() { _ = proxy.Close() }) // runs before pool.Close
	return pool, proxy
}

// A relay cut off from PostgreSQL while it publishes (partitioned, frozen)
// keeps its rows for about a lease: PostgreSQL then ends its silent session
// (idle_in_transaction_session_timeout) and another relay sends them. When
// the partition heals, the cut-off relay's outcome is not recorded.
func TestLockClaimPartitionedRelayLosesRowsAfterLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n, lease = 3, time.Second
	written := b.writeN(n, "orders", "partition")
	pool, proxy := proxiedPool(t, b)
	s1, entered, release := blockingSink()
	first, err := relay.New(pool, s1, b.config(relay.Config{Claim: relay.ClaimLock, Lease: lease, PublishTimeout: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	cut := processInBackground(b.ctx, first)
	defer finish(t, cut, release)
	defer proxy.Heal() // runs first
	waitEntered(t, entered)
	if st := proxy.Stats(); st.BytesUp == 0 {
		t.Fatalf("the first relay's claim did not go through the proxy: %+v", st)
	}

	proxy.Stall()
	stalled := time.Now()
	s2 := &sink{}
	second := b.newRelay(s2, relay.Config{Claim: relay.ClaimLock, Lease: lease})
	res, err := second.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 0 {
		t.Fatalf("right after the partition the second relay claimed %+v, want nothing: the lease has not run out", res)
	}
	// The server's idle timer last restarted at the latest heartbeat, at
	// most Lease/3 before the stall: the rows are free between about
	// 2/3 Lease and Lease after it.
	for res.Claimed == 0 {
		if time.Since(stalled) > lease+time.Minute {
			t.Fatalf("rows not claimable %v after the partition (lease %v): %v", time.Since(stalled), lease, b.rows("true"))
		}
		time.Sleep(20 * time.Millisecond)
		if res, err = second.ProcessBatch(b.ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(stalled)
	t.Logf("the second relay claimed the rows %v after the partition (lease %v)", took, lease)
	if took < lease/2 {
		t.Errorf("second relay claimed the rows %v after the partition, before the lease (%v) could have run out", took, lease)
	}
	if want := (relay.BatchResult{Claimed: n, Sent: n}); res != want {
		t.Errorf("second relay's ProcessBatch = %+v, want %+v", res, want)
	}

	// The partition heals and the first publish returns: too late.
	proxy.Heal()
	release()
	if !cut.wait(30 * time.Second) {
		t.Fatal("the partitioned relay's ProcessBatch did not return")
	}
	if cut.err == nil {
		t.Errorf("the partitioned relay's ProcessBatch = %+v, nil; want an error (PostgreSQL ended its session)", cut.res)
	}
	acked := s2.ackedByID()
	for _, id := range written {
		row := b.row(id)
		if row.Status != "sent" || row.Attempt != 1 || replicaOf(row.LockedBy) != second.ID() {
			t.Errorf("row %s: status %s, attempt %d, locked_by %v; want sent, 1, %s",
				id, row.Status, row.Attempt, deref(row.LockedBy), second.ID())
		}
		if acked[id] != 1 {
			t.Errorf("row %s acknowledged %d times by the second relay, want 1", id, acked[id])
		}
	}
}

// While a slow publish is alive, the heartbeat restarts the server's idle
// timer, so the claim's session (and its locks) outlives the lease many
// times over: another relay claims nothing, and the outcome is recorded.
func TestLockClaimHeartbeatKeepsRowsOfSlowPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Heartbeats come every lease/3; a lease of 3s leaves a busy machine 2s
	// to make each one before the server's idle timer ends the session.
	const n, lease = 3, 3 * time.Second
	written := b.writeN(n, "orders", "slow")
	slow, entered, release := blockingSink()
	a := b.newRelay(slow, relay.Config{Claim: relay.ClaimLock, Lease: lease, PublishTimeout: time.Minute})
	slowBatch := processInBackground(b.ctx, a)
	defer finish(t, slowBatch, release)
	waitEntered(t, entered)

	other := &sink{}
	rb := b.newRelay(other, relay.Config{Claim: relay.ClaimLock, Lease: lease})
	polls := 0
	for end := time.Now().Add(3 * lease); time.Now().Before(end); polls++ {
		res, err := rb.ProcessBatch(b.ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed != 0 {
			t.Fatalf("second relay claimed %d rows of a live publish after %d polls (the heartbeat did not keep the session)", res.Claimed, polls)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if k := b.count("status = 'pending' AND attempt = 0 AND locked_by IS NULL"); k != n {
		t.Errorf("during the slow publish %d of %d rows untouched, want all", k, n)
	}

	release()
	if !slowBatch.wait(30 * time.Second) {
		t.Fatal("the slow publish's ProcessBatch did not return")
	}
	if slowBatch.err != nil {
		t.Fatalf("slow publish's ProcessBatch: %v", slowBatch.err)
	}
	if want := (relay.BatchResult{Claimed: n, Sent: n}); slowBatch.res != want {
		t.Errorf("slow publish's ProcessBatch = %+v, want %+v", slowBatch.res, want)
	}
	acked := slow.ackedByID()
	for _, id := range written {
		row := b.row(id)
		if row.Status != "sent" || row.Attempt != 1 || replicaOf(row.LockedBy) != a.ID() {
			t.Errorf("row %s: status %s, attempt %d, locked_by %v; want sent, 1, %s",
				id, row.Status, row.Attempt, deref(row.LockedBy), a.ID())
		}
		if acked[id] != 1 {
			t.Errorf("row %s acknowledged %d times, want 1", id, acked[id])
		}
	}
	if k := other.callCount(); k != 0 {
		t.Errorf("the second relay published %d times, want never", k)
	}
}

// On shutdown a lock claim whose publish does not finish within
// ShutdownTimeout leaves its rows as they were (pending, attempt 0, no
// owner, no error) and ends its transaction: another relay sends them at
// once, on attempt 1.
func TestLockClaimGracefulShutdownReleasesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 5
	written := b.writeN(n, "orders", "shutdown")
	blocking, entered, _ := blockingSink() // never released: it blocks until shutdown cuts it short
	const shutdownTimeout = 300 * time.Millisecond
	first := b.startRelay(blocking, relay.Config{Claim: relay.ClaimLock, Lease: testLease, ShutdownTimeout: shutdownTimeout})
	waitEntered(t, entered)
	if k := b.count("status = 'pending' AND attempt = 0 AND locked_by IS NULL"); k != n {
		t.Fatalf("%d of %d rows untouched while in flight, want all (a lock claim writes nothing)", k, n)
	}
	start := time.Now()
	if err := first.stop(t); err != nil {
		t.Fatalf("Run returned %v on shutdown, want nil", err)
	}
	// Without the cut the publish would run until PublishTimeout (1m).
	if took := time.Since(start); took < shutdownTimeout || took > shutdownTimeout+15*time.Second {
		t.Errorf("Run returned %v after cancellation, want about ShutdownTimeout (%v)", took, shutdownTimeout)
	}
	if k := b.count("status = 'pending' AND attempt = 0 AND locked_by IS NULL AND locked_until IS NULL AND last_error IS NULL"); k != n {
		t.Fatalf("after shutdown %d of %d rows released (pending, attempt 0, no owner, no error): %v", k, n, b.rows("true"))
	}

	// Claimable at once, long before the 30s lease would have ended.
	s := &sink{}
	second := b.newRelay(s, relay.Config{Claim: relay.ClaimLock, Lease: testLease})
	res, err := second.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (relay.BatchResult{Claimed: n, Sent: n}); res != want {
		t.Errorf("second relay's ProcessBatch = %+v, want %+v", res, want)
	}
	acked := s.ackedByID()
	for _, id := range written {
		if acked[id] != 1 {
			t.Errorf("row %s published %d times by the second relay, want 1", id, acked[id])
		}
	}
	if k := b.count("status = 'sent' AND attempt = 1 AND regexp_replace(locked_by, '#[0-9]+$', '') = $1", second.ID()); k != n {
		t.Errorf("%d rows sent by the second relay with attempt 1, want %d: %v", k, n, b.rows("true"))
	}
}

// Lease and lock claims work side by side on one table: a lock claim
// rescues the rows of a dead lease-mode relay (attempt 2), and a lease-mode
// and a lock-mode relay draining a backlog together deliver every event
// exactly once.
func TestLockAndLeaseRelaysShareATable(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// (a) A dead lease-mode relay's lapsed claims.
	dead := b.writeN(5, "orders", "dead")
	if k := b.exec(`UPDATE {{table}}
SET status = 'processing',
    locked_by = 'dead-relay#1',
    locked_until = now() - interval '1 second',
    attempt = attempt + 1
WHERE status = 'pending'`); k != 5 {
		t.Fatalf("dead relay claimed %d rows, want 5", k)
	}
	rescuer := &sink{}
	r := b.newRelay(rescuer, relay.Config{Claim: relay.ClaimLock})
	res, err := r.ProcessBatch(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := (relay.BatchResult{Claimed: 5, Sent: 5}); res != want {
		t.Errorf("lock claim over lapsed leases = %+v, want %+v", res, want)
	}
	for _, m := range rescuer.ackedMessages() {
		if m.Attempt != 2 {
			t.Errorf("rescued row %s published with Attempt %d, want 2", m.ID, m.Attempt)
		}
	}
	for _, id := range dead {
		row := b.row(id)
		if row.Status != "sent" || row.Attempt != 2 || row.LockedUntil != nil || replicaOf(row.LockedBy) != r.ID() {
			t.Errorf("rescued row %s: status %s, attempt %d, locked_until %v, locked_by %v; want sent, 2, NULL, %s",
				id, row.Status, row.Attempt, row.LockedUntil, deref(row.LockedBy), r.ID())
		}
	}

	// (b) A backlog drained by a lease-mode and a lock-mode relay at once.
	leaseSink, lockSink := &sink{}, &sink{}
	leaseRelay := b.startRelay(leaseSink, relay.Config{Claim: relay.ClaimLease, Workers: 2, BatchSize: 50})
	lockRelay := b.startRelay(lockSink, relay.Config{Claim: relay.ClaimLock, Workers: 2, BatchSize: 50})
	var backlog []uuid.UUID
	for i := 0; i < 10; i++ {
		backlog = append(backlog, b.writeN(100, "orders", fmt.Sprintf("mixed%d", i))...)
	}
	await(t, 60*time.Second, func() bool { return b.count("status = 'sent'") == len(dead)+len(backlog) }, "backlog not drained: %v", b.statuses())
	if k := b.count("status <> 'sent'"); k != 0 {
		t.Errorf("%d rows not sent: %v", k, b.statuses())
	}
	byLease, byLock := leaseSink.ackedByID(), lockSink.ackedByID()
	owner := map[string]string{leaseRelay.ID(): "lease", lockRelay.ID(): "lock"}
	for _, row := range b.rows("id = ANY($1)", backlog) {
		if total := byLease[row.ID] + byLock[row.ID]; total != 1 {
			t.Errorf("row %s acknowledged %d times (lease relay %d, lock relay %d), want once", row.ID, total, byLease[row.ID], byLock[row.ID])
			continue
		}
		want := "lease"
		if byLock[row.ID] == 1 {
			want = "lock"
		}
		if got := owner[replicaOf(row.LockedBy)]; got != want || row.Attempt != 1 || row.LockedUntil != nil {
			t.Errorf("row %s published by the %s relay: locked_by %v (%q relay), attempt %d, locked_until %v; want the %s relay, 1, NULL",
				row.ID, want, deref(row.LockedBy), got, row.Attempt, row.LockedUntil, want)
		}
	}
	for _, id := range dead {
		if byLease[id]+byLock[id] != 0 {
			t.Errorf("rescued row %s published again by the running relays", id)
		}
	}
	t.Logf("backlog of %d: %d sent by the lease relay, %d by the lock relay", len(backlog), len(byLease), len(byLock))
}

// Lock claims and per-key ordering together: keyed events of ordered
// topics are still taken by the ordered claim (noted in their shard's row)
// and arrive in write order per key, while keyless ones go through lock
// claims (nothing written while they are published).
func TestLockClaimWithOrderedTopics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const keys, perKey, keyless = 3, 10, 5
	var mu sync.Mutex
	seenKeyless := map[uuid.UUID]bool{}
	s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
		// How each message's row looks while it is published: pending
		// either way, noted in its shard's claim (ordered) or not (lock
		// claim).
		rows, err := b.pool.Query(ctx, b.sql(`SELECT o.id, o.status || CASE WHEN EXISTS (
				SELECT 1 FROM `+b.table.Related("shard_ranges")+` AS s WHERE o.id = ANY (s.claimed)) THEN ' (claimed)' ELSE '' END
			FROM {{table}} AS o WHERE o.id = ANY($1)`), ids(msgs))
		if err != nil {
			t.Errorf("read rows during Publish: %v", err)
			return err
		}
		status := map[uuid.UUID]string{}
		for rows.Next() {
			var id uuid.UUID
			var st string
			if err := rows.Scan(&id, &st); err != nil {
				t.Errorf("read rows during Publish: %v", err)
			}
			status[id] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Errorf("read rows during Publish: %v", err)
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			want := "pending (claimed)"
			if m.Key == nil {
				want = "pending"
				seenKeyless[m.ID] = true
			}
			if status[m.ID] != want {
				t.Errorf("message %s (key %q) published while its row is %q, want %q", m.ID, m.Key, status[m.ID], want)
			}
		}
		return nil
	}}
	b.startRelay(s, relay.Config{Claim: relay.ClaimLock, BatchSize: 10, Ordering: relay.Ordering{Topics: []string{"*"}, Shards: 4}})

	// Keys interleaved, one transaction per event, keyless ones in between.
	var keylessIDs []uuid.UUID
	for seq := 0; seq < perKey; seq++ {
		for k := 0; k < keys; k++ {
			b.write(outbox.Message{Topic: "orders", Key: fmt.Appendf(nil, "key-%d", k), Payload: fmt.Appendf(nil, "key-%d:%d", k, seq)})
		}
		if seq%2 == 0 {
			keylessIDs = append(keylessIDs, b.write(outbox.Message{Topic: "orders", Payload: fmt.Appendf(nil, "keyless:%d", seq/2)})...)
		}
	}
	total := keys*perKey + keyless
	await(t, 30*time.Second, func() bool { return b.count("status = 'sent'") == total }, "not all sent: %v", b.statuses())

	next := map[string]int{} // per key, the sequence number expected next
	acked := s.ackedByID()
	for _, m := range s.ackedMessages() {
		if m.Key == nil {
			continue
		}
		key, seqText, _ := strings.Cut(string(m.Payload), ":")
		seq, err := strconv.Atoi(seqText)
		if err != nil || key != string(m.Key) {
			t.Fatalf("unexpected message %q with key %q", m.Payload, m.Key)
		}
		if seq != next[key] {
			t.Errorf("key %s: event %d acknowledged when %d was due (out of order or duplicated)", key, seq, next[key])
		}
		next[key] = seq + 1
	}
	for k := 0; k < keys; k++ {
		if key := fmt.Sprintf("key-%d", k); next[key] != perKey {
			t.Errorf("key %s: %d events delivered in order, want %d", key, next[key], perKey)
		}
	}
	if len(keylessIDs) != keyless {
		t.Fatalf("wrote %d keyless events, want %d", len(keylessIDs), keyless)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range keylessIDs {
		if acked[id] != 1 || !seenKeyless[id] {
			t.Errorf("keyless row %s acknowledged %d times (seen by the sink: %v), want once", id, acked[id], seenKeyless[id])
		}
	}
	if k := b.count("status = 'sent' AND attempt = 1"); k != total {
		t.Errorf("%d of %d rows sent on attempt 1", k, total)
	}
}

// A relay that starts while the database does not answer (a stalled
// connection, not a refused one) says so within about a lease and keeps
// trying; once the database answers, it starts and sends. Without a bound
// on each try, Run waited on the stalled connection, silently, for as
// long as TCP kept it.
func TestRunStartsThroughAStalledDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.writeN(1, "orders", "after the stall")[0]
	cfg := b.pool.Config()
	proxy := testdb.Proxied(t, cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(func() { _ = proxy.Close() }) // runs before pool.Close
	proxy.Stall()

	logs := &logRecorder{}
	s := &sink{}
	r, err := relay.New(pool, s, b.config(relay.Config{Lease: time.Second, Logger: slog.New(logs)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}()
	const warning = "WARN database unreachable; retrying"
	await(t, time.Minute, func() bool { return logs.count(warning) >= 2 }, "no %q while the database was stalled", warning)
	if n := b.row(id).Status; n != "pending" {
		t.Fatalf("the row is %s while the relay could not reach the database", n)
	}
	proxy.Heal()
	await(t, time.Minute, func() bool { return b.row(id).Status == "sent" }, "the relay did not send once the database answered")
}

package integration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// With Workers 2 a relay has two batches in flight at once, and still
// delivers every event exactly once. The backlog arrives while both
// workers are idle, in one transaction (one notification), and the relay
// polls once a minute: the second worker claims because the first one's
// full claim invited it, while the first batch is published.
func TestWorkersPublishBatchesSideBySide(t *testing.T) {
	t.Parallel()
	b := setup(t)
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
		// Each publish waits for a second one to overlap it, however long
		// the machine takes to start it; once two have overlapped, none
		// waits. A single worker never gets one (each publish waits until
		// PublishTimeout, a minute).
		select {
		case <-both:
		case <-ctx.Done():
		}
		return nil
	}}
	rr := b.startRelay(s, relay.Config{BatchSize: 50, Workers: 2, PollInterval: slowPoll})
	b.awaitListening()
	ids := b.writeN(400, "orders", "w")
	// 30s: below the poll and the PublishTimeout (a minute each) that end
	// the wait when no worker was invited.
	await(t, 30*time.Second, func() bool { return b.count("status = 'sent'") == len(ids) }, "not all sent: %v", b.statuses())
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

// Each notification is taken by one worker: four idle workers woken by a
// commit claim about once, not four times.
func TestWorkersShareWakeUps(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var claims atomic.Int32
	cfg := b.pool.Config().Copy()
	cfg.ConnConfig.Tracer = claimCounter{&claims}
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r, err := relay.New(pool, &sink{}, b.config(relay.Config{Workers: 4, PollInterval: slowPoll}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	b.awaitListening()
	const events = 20
	atStart := claims.Load()
	for i := range events {
		id := b.write(outbox.Message{Topic: "orders", Payload: fmt.Appendf(nil, "e%d", i)})[0]
		await(t, 10*time.Second, func() bool { return b.row(id).Status == "sent" }, "event %d not sent", i)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// One claim per commit, and now and then a second one when a commit
	// lands while a claim runs; without sharing it would be four.
	if n := claims.Load() - atStart; n < events || n > 2*events {
		t.Fatalf("%d claims for %d commits with 4 workers, want %d to %d", n, events, events, 2*events)
	}
}

// claimCounter counts the unordered claim statements a pool runs, alone or
// in a batch (a claim carries the mark-sent of earlier batches in one).
type claimCounter struct{ n *atomic.Int32 }

func (c claimCounter) count(sql string) {
	if strings.HasPrefix(sql, "WITH picked AS") {
		c.n.Add(1)
	}
}

func (c claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}

func (claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c claimCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.SQL)
}

func (claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// A relay's lease claims run one at a time, however many workers drain a
// backlog: claims side by side would each try to lock the rows the other
// is taking. The workers still publish side by side.
func TestWorkersClaimOneAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var inFlight, most, claims atomic.Int32
	cfg := b.pool.Config().Copy()
	cfg.ConnConfig.Tracer = overlapCounter{inFlight: &inFlight, most: &most, claims: &claims}
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ids := b.writeN(2000, "orders", "w")
	r, err := relay.New(pool, &sink{}, b.config(relay.Config{Workers: 4, BatchSize: 50}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	await(t, 30*time.Second, func() bool { return b.count("status = 'sent'") == len(ids) }, "not all sent: %v", b.statuses())
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := claims.Load(); n < int32(len(ids)/50) {
		t.Fatalf("%d claims for %d events in batches of 50", n, len(ids))
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("up to %d claims ran at once; want 1", m)
	}
}

// overlapCounter counts the unordered claims a pool runs and the most that
// were in flight at once. A claim is always sent as a batch (with the
// mark-sent of earlier batches, or alone).
type overlapCounter struct{ inFlight, most, claims *atomic.Int32 }

type claimKey struct{}

func (c overlapCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		if strings.HasPrefix(q.SQL, "WITH picked AS") {
			c.claims.Add(1)
			n := c.inFlight.Add(1)
			for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
			}
			return context.WithValue(ctx, claimKey{}, true)
		}
	}
	return ctx
}

func (c overlapCounter) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if ctx.Value(claimKey{}) != nil {
		c.inFlight.Add(-1)
	}
}

func (overlapCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (overlapCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (overlapCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A batch held up by a slow sink holds notifications back for about a poll
// interval at most: another worker's poll claims what arrived meanwhile.
func TestWorkersSlowBatchHoldsOthersBackOnlyUntilAPoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var held atomic.Bool
	s := &sink{fn: func(ctx context.Context, msgs []outbox.Message) error {
		if string(msgs[0].Payload) == "slow" && held.CompareAndSwap(false, true) {
			select { // the first publish of "slow" hangs until the test ends it
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}}
	b.startRelay(s, relay.Config{Workers: 2, PollInterval: 200 * time.Millisecond})
	b.awaitListening()
	b.write(outbox.Message{Topic: "orders", Payload: []byte("slow")})
	await(t, 10*time.Second, held.Load, "the slow batch was not published")
	fast := b.write(outbox.Message{Topic: "orders", Payload: []byte("fast")})[0]
	// The slow batch ends with PublishTimeout (1m): 30s tells the two apart.
	await(t, 30*time.Second, func() bool { return b.row(fast).Status == "sent" }, "an event waited for the slow batch")
	close(release)
	await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == 2 }, "not all sent: %v", b.statuses())
}

package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// runOrdered is ordered loop number loop (Run starts Ordering.Loops of them): it
// serves the ordered topics until ctx ends: it leases the least recently
// served shard that has work, publishes that shard's rows in order until
// it is drained or ShardBudget rows were claimed, hands the shard back and
// leases the next. A shard is leased by one loop at a time, so the loops
// serve different shards side by side. See docs/ordering.md.
func (r *Relay) runOrdered(ctx context.Context, loop int) {
	slot := r.live.orderedSlot(loop)
	// Leasing and handing back shards outlive ctx, within the shutdown
	// bound.
	hard, stopHard := shutdownBound(ctx, r.cfg)
	defer stopHard()
	dbDown := newExponential(r.cfg.OutageBackoffMin, r.cfg.OutageBackoffMax)
	var settle settling
	for ctx.Err() == nil {
		if r.prober != nil && r.sink.isDown() {
			r.sink.await(ctx, false) // breaker.watch probes
			continue
		}
		woken := r.bell.next()
		lessee := r.tokens.next()
		lctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
		shard, ok, err := r.shards.LeaseShard(lctx, lessee)
		cancel()
		switch {
		case err != nil:
			d := min(dbDown.NextBackOff(), r.cfg.OutageBackoffMax)
			r.log.Warn("database error; retrying", "error", err, "retry_in", d)
			sleep(ctx, d)
			continue
		case !ok:
			// No shard has ready work: wait for a commit or the next poll.
			// A commit that woke us may not be ready yet, because an older
			// transaction elsewhere on the server still runs (the horizon,
			// docs/ordering.md), and its end sends no notification: after
			// a wake-up, look again soon, backing off to settleMax, for
			// one PollInterval.
			if idle(ctx, settle.wait(r.cfg.PollInterval, time.Now()), woken) {
				settle.woken(time.Now())
			}
			continue
		}
		dbDown.Reset()
		r.pipe.observe(Event{Kind: EventShardLeased, Shard: shard})
		c := &shardClaims{r: r, shard: shard, lessee: lessee}
		claimed, wait, abandoned := c.serve(ctx, slot)
		if abandoned {
			// A publish may still be on its way: no other replica may
			// publish the shard's keys before the lease ends.
			r.log.Warn("publish abandoned; the shard returns when its lease ends", "shard", shard)
		} else if err := c.handBack(hard); err != nil {
			r.log.Warn("handing back shard failed; it returns when its lease ends", "shard", shard, "error", err)
		}
		r.log.Debug("shard served", "shard", shard, "claimed", claimed)
		// The loop no longer serves the shard, handed back or not.
		r.pipe.observe(Event{Kind: EventShardHandedBack, Shard: shard, Rows: claimed})
		if r.prober != nil && r.sink.isDown() {
			continue // no backoff: the loop's top waits for the sink
		}
		if wait > 0 {
			sleep(ctx, wait)
		}
	}
}

// serve claims and publishes batches of the shard until it has no ready
// rows, ShardBudget rows were claimed, or something asks for a pause; wait
// is how long to pause before leasing again. abandoned reports a publish
// abandoned without an outcome: the shard must not be handed back.
// Otherwise the last batch's write-back may still wait (c.waiting): the
// hand-back writes it.
func (c *shardClaims) serve(ctx context.Context, slot *atomic.Int64) (claimed int, wait time.Duration, abandoned bool) {
	r := c.r
	for claimed < r.cfg.Ordering.ShardBudget && ctx.Err() == nil {
		limit := r.orderedSizes.next()
		res, full, err := r.pipe.processIn(ctx, c, limit, r.orderedSizes, nil, slot)
		claimed += res.Claimed
		switch {
		case res.Abandoned > 0:
			return claimed, 0, true
		case err != nil:
			r.log.Warn("database error; retrying", "shard", c.shard, "error", err)
			return claimed, r.cfg.OutageBackoffMin, false
		case res.SinkUnavailable:
			return claimed, res.Backoff, false
		case claimed == 0:
			// Work that is not ready yet: a head waiting for its retry, or a
			// transaction older than the rows still running.
			return 0, r.cfg.PollInterval, false
		case !full:
			return claimed, 0, false // drained: on to the next shard at once
		}
	}
	return claimed, 0, false
}

// shardClaims claim the rows of one leased shard of ordered topics
// (docs/ordering.md): up to the ordered loop's batch size (batch_size.go)
// of ready rows, in write order per key,
// published in rounds of one event per key (pipeline.go). The claim renews
// the shard's lease with the rows'.
//
// A batch's write-back waits for the shard's next statement: the next
// claim, or the hand-back, writes it first, in that statement's
// transaction and round trip, so that a batch costs one transaction where it cost two
// (claim, then write-back), as an unordered batch's mark-sent rides on
// the next claim (sent_batching.go). Nothing comes between the write-back
// and that statement in serve, so the rows wait for no timer. A statement
// that fails writes neither: the write-back waits on, and the hand-back
// retries it. Only a batch with an abandoned publish is written back at
// once, since its shard is not handed back.
type shardClaims struct {
	r      *Relay
	shard  int
	lessee string // the token of the shard's lease
	// waiting is the last batch's write-back, until a statement writes
	// it; nil when none waits.
	waiting *waitingWrite
}

// waitingWrite is a batch's write-back waiting for the shard's next
// statement, with the batch so far for its log line.
type waitingWrite struct {
	store.OrderedWrite
	out *outcome // the outcome with what the relay counts of it
	res BatchResult
	ph  phases
}

func (c *shardClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	r := c.r
	cctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	start := time.Now()
	claimed, got, err := r.shards.ClaimOrdered(cctx, owner, limit, c.shard, c.lessee, c.prior())
	if got.Written {
		c.written(got, time.Since(start))
	}
	if err != nil {
		return nil, err
	}
	rows := claimed.Rows
	b := &batch{
		mode:    ClaimOrdered,
		rows:    rows,
		ordered: true,
		park:    r.cfg.Ordering.HeadOfLine == HeadOfLinePark,
		// The shard's lease is the claim's hold on its rows.
		renew: func(ctx context.Context) (int, error) {
			held, err := r.shards.ExtendShard(ctx, c.shard, c.lessee)
			if err != nil || held {
				return 0, err
			}
			return len(rows), nil
		},
	}
	b.record = func(hard context.Context, owner string, out *outcome, res *BatchResult) (bool, error) {
		w := store.OrderedWrite{Shard: c.shard, Lessee: c.lessee, Owner: owner, Out: out.Outcome, TIDs: claimedTIDs(rows), Raise: claimed.Raise(len(out.Sent))}
		if res.Abandoned == 0 {
			c.waiting = &waitingWrite{OrderedWrite: w, out: out, res: *res, ph: b.ph}
			return true, nil
		}
		// Rows with no outcome stay noted in the shard row, so that
		// whoever leases the shard next counts their attempt.
		w.Unknown = withoutOutcome(rows, out)
		return false, c.record(hard, w, out, res)
	}
	return b, nil
}

// prior returns the write-back waiting for the next statement, or nil.
func (c *shardClaims) prior() *store.OrderedWrite {
	if c.waiting == nil {
		return nil
	}
	return &c.waiting.OrderedWrite
}

// written clears and logs the waiting write-back, which a statement that
// took took has just written, with the counts got.
func (c *shardClaims) written(got store.Recorded, took time.Duration) {
	w := c.waiting
	if w == nil {
		return
	}
	c.waiting = nil
	w.ph.record = took
	w.res.count(got, w.out)
	c.r.pipe.logBatch(w.res, w.ph, w.out.Retries, w.out.Failures, w.out.topics)
}

// count sets the outcome counts of res from a write-back of out that
// wrote got.
func (res *BatchResult) count(got store.Recorded, out *outcome) {
	res.Sent, res.Retried, res.Failed = got.Sent, got.Retried, got.Failed
	res.Released = len(out.released)
	res.Fenced += len(out.Sent) + len(out.Retries) + len(out.Failures) - got.Sent - got.Retried - got.Failed
}

// handBack returns the shard, with the write-back that waits written first
// in the same transaction; with one waiting it is retried until it
// succeeds or a lease has passed, since the rows would be published again.
func (c *shardClaims) handBack(hard context.Context) error {
	r := c.r
	ctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	if c.waiting == nil {
		_, err := r.shards.HandBack(ctx, c.shard, c.lessee, nil)
		return err
	}
	start := time.Now()
	var got store.Recorded
	_, err := r.pipe.retryWrite(ctx, func(ctx context.Context) (int, error) {
		var err error
		got, err = r.shards.HandBack(ctx, c.shard, c.lessee, c.prior())
		return 0, err
	})
	if err != nil {
		return fmt.Errorf("record outcome of %d claimed rows: %w; they return when the shard is leased again", c.waiting.res.Claimed, err)
	}
	c.written(got, time.Since(start))
	return nil
}

// record writes w, the outcome out of a batch, on its own, fenced by the
// shard's lease (record_ordered.sql), and counts it in res.
func (c *shardClaims) record(hard context.Context, w store.OrderedWrite, out *outcome, res *BatchResult) error {
	r := c.r
	wctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	var got store.Recorded
	_, err := r.pipe.retryWrite(wctx, func(ctx context.Context) (int, error) {
		var err error
		got, err = r.shards.RecordOrdered(ctx, w)
		return 0, err
	})
	if err != nil {
		return fmt.Errorf("record outcome of %d claimed rows of shard %d: %w; they return when the shard is leased again", res.Claimed, c.shard, err)
	}
	res.count(got, out)
	return nil
}

// claimedTIDs returns the tuple ids where the claim read rows, for the
// write-back, which picks the sent rows among them by id; a claim of a
// partitioned table returns none.
func claimedTIDs(rows []store.Row) []store.TID {
	tids := make([]store.TID, 0, len(rows))
	for _, x := range rows {
		if x.TID.Valid {
			tids = append(tids, x.TID)
		}
	}
	return tids
}

// withoutOutcome returns the ids of rows that out gives no outcome.
func withoutOutcome(rows []store.Row, out *outcome) []uuid.UUID {
	known := make(map[uuid.UUID]bool, len(rows))
	for _, id := range out.Sent {
		known[id] = true
	}
	for _, id := range out.released {
		known[id] = true
	}
	for _, x := range out.Retries {
		known[x.ID] = true
	}
	for _, f := range out.Failures {
		known[f.ID] = true
	}
	var ids []uuid.UUID
	for _, x := range rows {
		if !known[x.ID] {
			ids = append(ids, x.ID)
		}
	}
	return ids
}

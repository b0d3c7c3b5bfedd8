package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// shardClaims claim the rows of one leased shard of ordered topics
// (docs/ordering.md): up to the ordered loop's batch size (batch_size.go)
// of ready rows, in write order per key,
// published in rounds of one event per key (pipeline.go). The claim renews
// the shard's lease with the rows'. The ordered loops (Relay.runOrdered,
// run.go) lease a shard and serve it.
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
	shards store.Shards
	pipe   *pipeline
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

// serve claims and publishes batches of the shard, sized by sizes (the
// ordered loops' adaptive batch size), until it has no ready rows,
// ShardBudget rows were claimed, or something asks for a pause; wait
// is how long to pause before leasing again. abandoned reports a publish
// abandoned without an outcome: the shard must not be handed back.
// Otherwise the last batch's write-back may still wait (c.waiting): the
// hand-back writes it.
func (c *shardClaims) serve(ctx context.Context, sizes *batchSizer, slot *atomic.Int64) (claimed int, wait time.Duration, abandoned bool) {
	p := c.pipe
	for claimed < p.cfg.Ordering.ShardBudget && ctx.Err() == nil {
		limit := sizes.next()
		res, full, err := p.processIn(ctx, c, limit, sizes, nil, slot)
		claimed += res.Claimed
		switch {
		case res.Abandoned > 0:
			return claimed, 0, true
		case err != nil:
			p.log.Warn("database error; retrying", "shard", c.shard, "error", err)
			return claimed, p.cfg.OutageBackoffMin, false
		case res.SinkUnavailable:
			return claimed, res.Backoff, false
		case claimed == 0:
			// Work that is not ready yet: a head waiting for its retry, or a
			// transaction older than the rows still running.
			return 0, p.cfg.PollInterval, false
		case !full:
			return claimed, 0, false // drained: on to the next shard at once
		}
	}
	return claimed, 0, false
}

func (c *shardClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	cctx, cancel := context.WithTimeout(hard, c.pipe.cfg.Lease)
	defer cancel()
	start := time.Now()
	claimed, got, err := c.shards.ClaimOrdered(cctx, owner, limit, c.shard, c.lessee, c.prior())
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
		park:    c.pipe.cfg.Ordering.HeadOfLine == HeadOfLinePark,
		// The shard's lease is the claim's hold on its rows.
		renew: func(ctx context.Context) (int, error) {
			held, err := c.shards.ExtendShard(ctx, c.shard, c.lessee)
			if err != nil || held {
				return 0, err
			}
			return len(rows), nil
		},
	}
	b.record = func(hard context.Context, owner string, out *outcome, res *BatchResult) (bool, error) {
		w := store.OrderedWrite{Shard: c.shard, Lessee: c.lessee, Owner: owner, Out: out.Outcome, TIDs: store.TIDsOf(rows), Raise: claimed.Raise(len(out.Sent))}
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
	c.pipe.logBatch(w.res, w.ph, w.out.Retries, w.out.Failures, w.out.topics)
}

// handBack returns the shard, with the write-back that waits written first
// in the same transaction; with one waiting it is retried until it
// succeeds or a lease has passed, since the rows would be published again.
func (c *shardClaims) handBack(hard context.Context) error {
	ctx, cancel := context.WithTimeout(hard, c.pipe.cfg.Lease)
	defer cancel()
	if c.waiting == nil {
		_, err := c.shards.HandBack(ctx, c.shard, c.lessee, nil)
		return err
	}
	start := time.Now()
	var got store.Recorded
	_, err := c.pipe.retryWrite(ctx, func(ctx context.Context) (int, error) {
		var err error
		got, err = c.shards.HandBack(ctx, c.shard, c.lessee, c.prior())
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
	wctx, cancel := context.WithTimeout(hard, c.pipe.cfg.Lease)
	defer cancel()
	var got store.Recorded
	_, err := c.pipe.retryWrite(wctx, func(ctx context.Context) (int, error) {
		var err error
		got, err = c.shards.RecordOrdered(ctx, w)
		return 0, err
	})
	if err != nil {
		return fmt.Errorf("record outcome of %d claimed rows of shard %d: %w; they return when the shard is leased again", res.Claimed, c.shard, err)
	}
	res.count(got, out)
	return nil
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

package relay

import (
	"context"
	"sync/atomic"
	"time"
)

// runOrdered is ordered loop number loop (Run starts Workers of them): it
// serves the ordered topics until ctx ends: it leases the least recently
// served shard that has work, publishes that shard's rows in order until
// it is drained or ShardBudget rows were claimed, hands the shard back and
// leases the next. A shard is leased by one loop at a time, so the loops
// serve different shards side by side. See docs/ordering.md.
func (r *Relay) runOrdered(ctx context.Context, loop int) {
	slot := r.live.orderedSlot(loop)
	// Leasing and handing back shards outlive ctx, within the shutdown
	// bound.
	hard, stopHard := r.shutdownBound(ctx)
	defer stopHard()
	dbDown := newExponential(r.cfg.OutageBackoffMin, r.cfg.OutageBackoffMax)
	var settle time.Duration // > 0: re-checking after a wake-up
	for ctx.Err() == nil {
		if r.prober != nil && r.sink.isDown() {
			r.sink.await(ctx, false) // breaker.watch probes
			continue
		}
		woken := r.bell.next()
		lessee := r.token()
		lctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
		shard, ok, err := r.pg.leaseShard(lctx, lessee)
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
			// a wake-up, look again soon, backing off towards PollInterval.
			wait := r.cfg.PollInterval
			if settle > 0 {
				wait = min(settle, wait)
				if settle *= 2; settle >= r.cfg.PollInterval {
					settle = 0
				}
			}
			if idle(ctx, wait, woken) {
				settle = settleMin
			}
			continue
		}
		dbDown.Reset()
		r.observe(Event{Kind: EventShardLeased, Shard: shard})
		claimed, wait := r.serveShard(ctx, shard, lessee, slot)
		hctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
		if err := r.pg.handBack(hctx, shard, lessee); err != nil {
			r.log.Warn("handing back shard failed; it returns when its lease ends", "shard", shard, "error", err)
		}
		cancel()
		r.log.Debug("shard served", "shard", shard, "claimed", claimed)
		r.observe(Event{Kind: EventShardHandedBack, Shard: shard, Rows: claimed})
		if r.prober != nil && r.sink.isDown() {
			continue // no backoff: the loop's top waits for the sink
		}
		if wait > 0 {
			sleep(ctx, wait)
		}
	}
}

// serveShard claims and publishes batches of shard until it has no ready
// rows, ShardBudget rows were claimed, or something asks for a pause; wait
// is how long to pause before leasing again.
func (r *Relay) serveShard(ctx context.Context, shard int, lessee string, slot *atomic.Int64) (claimed int, wait time.Duration) {
	for claimed < r.cfg.Ordering.ShardBudget && ctx.Err() == nil {
		limit := r.orderedSizes.next()
		res, err := r.processIn(ctx, shardClaims{r, shard, lessee}, limit, r.orderedSizes, nil, slot)
		claimed += res.Claimed
		switch {
		case err != nil:
			r.log.Warn("database error; retrying", "shard", shard, "error", err)
			return claimed, r.cfg.OutageBackoffMin
		case res.SinkUnavailable:
			return claimed, res.Backoff
		case claimed == 0:
			// Work that is not ready yet: a head waiting for its retry, or a
			// transaction older than the rows still running.
			return 0, r.cfg.PollInterval
		case res.Claimed < limit:
			return claimed, 0 // drained: on to the next shard at once
		}
	}
	return claimed, 0
}

// shardClaims claim the rows of one leased shard of ordered topics
// (docs/ordering.md): up to the ordered loop's batch size (batch_size.go)
// of ready rows, in write order per key,
// published in rounds of one event per key (pipeline.go). The claim renews
// the shard's lease with the rows'.
type shardClaims struct {
	r      *Relay
	shard  int
	lessee string // the token of the shard's lease
}

func (c shardClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	r := c.r
	cctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	rows, err := r.pg.claimOrdered(cctx, owner, limit, c.shard, c.lessee)
	if err != nil {
		return nil, err
	}
	b := r.leases.leased(rows, owner)
	b.mode, b.ordered = ClaimOrdered, true
	b.park = r.cfg.Ordering.HeadOfLine == HeadOfLinePark
	extend := b.renew
	b.renew = func(ctx context.Context) (int, error) {
		if err := r.pg.extendShard(ctx, c.shard, c.lessee); err != nil {
			r.log.Warn("extending shard lease failed", "shard", c.shard, "error", err)
		}
		return extend(ctx)
	}
	return b, nil
}

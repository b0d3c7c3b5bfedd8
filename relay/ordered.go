package relay

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// runOrdered serves the ordered topics until ctx ends: it leases the least
// recently served shard that has work, publishes that shard's rows in
// order until it is drained or ShardBudget rows were claimed, hands the
// shard back and leases the next. See docs/ordering.md.
func (r *Relay) runOrdered(ctx context.Context) {
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
		shard, ok, err := r.store.leaseShard(lctx, lessee)
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
		claimed, wait := r.serveShard(ctx, shard, lessee)
		hctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
		if err := r.store.handBack(hctx, shard, lessee); err != nil {
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
func (r *Relay) serveShard(ctx context.Context, shard int, lessee string) (claimed int, wait time.Duration) {
	for claimed < r.cfg.Ordering.ShardBudget && ctx.Err() == nil {
		res, err := r.processShardBatch(ctx, shard, lessee)
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
		case res.Claimed < r.cfg.BatchSize:
			return claimed, 0 // drained: on to the next shard at once
		}
	}
	return claimed, 0
}

// token returns a fresh owner token: "<ID>#<n>".
func (r *Relay) token() string {
	return r.cfg.ID + "#" + strconv.FormatUint(r.seq.Add(1), 10)
}

// processShardBatch claims up to BatchSize ready rows of shard in write
// order and publishes them in rounds: each round carries at most one event
// per key, and a key's next event goes out only after the previous one was
// acknowledged. A key whose event did not get through stops there: its
// later events are released untouched and wait behind it (HeadOfLineWait),
// unless the event failed for good or was parked (HeadOfLinePark), in
// which case the key goes on.
func (r *Relay) processShardBatch(ctx context.Context, shard int, lessee string) (BatchResult, error) {
	owner := r.token()
	hard, stopHard := r.shutdownBound(ctx)
	defer stopHard()
	r.batches.Add(1)
	defer r.batches.Add(-1)
	cctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	start := time.Now()
	rows, err := r.store.claimOrdered(cctx, owner, r.cfg.BatchSize, shard, lessee)
	if err == nil {
		r.observe(Event{Kind: EventClaimed, Claim: ClaimOrdered, Rows: len(rows), Duration: time.Since(start)})
	}
	if err != nil || len(rows) == 0 {
		return BatchResult{}, err
	}
	res := BatchResult{Claimed: len(rows)}
	ph := phases{mode: ClaimOrdered, claim: time.Since(start)}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.tx, b.tx), slices.Compare(a.id[:], b.id[:]))
	})
	var out outcome
	ids := make([]uuid.UUID, len(rows))
	queues := map[string][]outbox.Message{} // per topic and key, in write order
	var keys []string                       // in order of first appearance
	for i, x := range rows {
		ids[i] = x.id
		msg, err := r.decode(x)
		if err != nil {
			out.failures = append(out.failures, failure{x.id, err.Error()})
			continue
		}
		k := msg.Topic + "\x00" + string(msg.Key)
		if _, seen := queues[k]; !seen {
			keys = append(keys, k)
		}
		queues[k] = append(queues[k], msg)
	}

	stop := r.keepLeases(hard, r.extender(owner, ids), func(hctx context.Context) {
		if err := r.store.extendShard(hctx, shard, lessee); err != nil {
			r.log.Warn("extending shard lease failed", "shard", shard, "error", err)
		}
	})
	published := 0 // messages handed to the sink, over all rounds
	for ctx.Err() == nil {
		var batch []outbox.Message
		var batchKeys []string
		for _, k := range keys {
			if q := queues[k]; len(q) > 0 {
				batch, batchKeys = append(batch, q[0]), append(batchKeys, k)
				queues[k] = q[1:]
			}
		}
		if len(batch) == 0 {
			break
		}
		start = time.Now()
		results, cut := r.publishOnce(ctx, batch)
		ph.publish += time.Since(start)
		published += len(batch)
		down, finished := r.classify(batch, results, cut, r.cfg.Ordering.HeadOfLine == HeadOfLinePark, &out, &res)
		for i := range batch {
			if !finished[i] { // the key waits behind this event
				out.released = append(out.released, idsOf(queues[batchKeys[i]])...)
				queues[batchKeys[i]] = nil
			}
		}
		if cut != publishWhole || down {
			break
		}
	}
	stop()
	if published > 0 {
		r.observe(Event{Kind: EventPublished, Claim: ClaimOrdered, Rows: published, Duration: ph.publish})
	}
	for _, k := range keys { // not attempted: shutdown or outage stopped the rounds
		out.released = append(out.released, idsOf(queues[k])...)
	}
	start = time.Now()
	if err := r.record(hard, owner, &out, &res); err != nil {
		return res, err
	}
	ph.record = time.Since(start)
	r.logBatch(res, ph, out.retries, out.failures)
	return res, nil
}

func idsOf(msgs []outbox.Message) []uuid.UUID {
	ids := make([]uuid.UUID, len(msgs))
	for i := range msgs {
		ids[i] = msgs[i].ID
	}
	return ids
}

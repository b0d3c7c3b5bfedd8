package relay

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// leaseClaims are plain lease claims (ClaimLease), as ProcessBatch makes
// them: each reads pending rows from the oldest, looks for lapsed leases
// too, and has its own rows marked sent before the batch is over.
type leaseClaims struct {
	r *Relay
	// mu lets one lease claim of the relay run at a time. Claims side by
	// side scan the same index entries, and each would try to lock every
	// row the other is taking and skip it: the database did about a
	// quarter more work per batch for the same events
	// (docs/benchmarks.md). A worker that waits for it still publishes and
	// records while the other claims.
	mu sync.Mutex
}

func (c *leaseClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	cctx, cancel := context.WithTimeout(hard, c.r.cfg.Lease)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil { // cancelled while another claim ran
		return nil, nil
	}
	rows, _, err := c.r.store.claim(cctx, owner, limit, everything, nil)
	if err != nil {
		return nil, err
	}
	return c.leased(rows, owner), nil
}

// leased returns the batch of rows leased to owner, whose outcome is
// written by recordLeased.
func (c *leaseClaims) leased(rows []row, owner string) *batch {
	ids := make([]uuid.UUID, len(rows))
	for i := range rows {
		ids[i] = rows[i].id
	}
	return &batch{
		mode:  ClaimLease,
		rows:  rows,
		renew: func(ctx context.Context) (int, error) { return c.r.store.extend(ctx, owner, ids) },
		record: func(hard context.Context, owner string, out *outcome, res *BatchResult) (bool, error) {
			return false, c.r.recordLeased(hard, owner, out, res)
		},
	}
}

// streamClaims are the lease claims of Run's workers, which claim batch
// after batch. Three things make a stream of them cheaper than as many
// plain claims:
//
//   - a claim reads pending rows from the claim floor up, and a look for
//     lapsed leases reads those that ended since the last complete look;
//     a sweep now and then reads both from the lowest (claim_floor.go);
//   - a claim looks for lapsed leases only if no claim did within
//     lapsedEvery;
//   - a batch the sink took whole has its rows marked sent by the next
//     claim, in the claim's transaction (sent_batching.go).
type streamClaims struct {
	lease *leaseClaims // its mutex serialises every lease claim of the relay
	sent  *sentBatching
	// Guarded by lease.mu: where the next claim starts reading pending
	// rows; when a claim last looked for lapsed leases; when the last
	// look that took every lapsed lease it read (its batch was not full)
	// was sent, zero before the first; and when the next sweep is due.
	floor     floor
	lapsedAt  time.Time
	coveredAt time.Time
	sweepAt   time.Time
}

// lapsedEvery is how often a stream's claims look for lapsed leases. The
// lapsed-lease branch of the claim reads processing_idx, and until a
// VACUUM that index keeps a dead entry for every row claimed and sent: a
// busy relay claiming every few milliseconds would read many of them
// again each time. Idle relays, which claim once a poll interval, look
// every time.
const lapsedEvery = 250 * time.Millisecond

// lapsedDue reports whether this claim should look for lapsed leases, and
// if so counts it as having looked. Callers hold lease.mu.
func (c *streamClaims) lapsedDue() bool {
	now := time.Now()
	if now.Sub(c.lapsedAt) < lapsedEvery {
		return false
	}
	c.lapsedAt = now
	return true
}

// next returns what the claim sent at now reads, and whether it is a
// sweep. Callers hold lease.mu.
func (c *streamClaims) next(now time.Time) (claimRange, bool) {
	rg := claimRange{from: c.floor}
	if !c.lapsedDue() {
		return rg, false
	}
	if !now.Before(c.sweepAt) {
		return everything, true
	}
	rg.lapsed = true
	if !c.coveredAt.IsZero() {
		rg.lapsedWithin = now.Sub(c.coveredAt) + lapsedMargin
	}
	return rg, false
}

// moved records a claim sent at start that read rg (a sweep when sweep),
// took rows with a batch of limit and took took. Callers hold lease.mu.
func (c *streamClaims) moved(rg claimRange, sweep bool, rows []row, limit int, start time.Time, took time.Duration) {
	full := len(rows) >= limit
	if rg.lapsed && !full {
		c.coveredAt = start
	}
	switch {
	case sweep && full && below(rows, c.floor):
		c.sweepAt = time.Time{} // more may be below: the next look sweeps again
	case sweep:
		c.sweepAt = start.Add(sweepEvery(took))
	}
	// A claim that looked for lapsed leases and filled its batch may not
	// have read pending rows at all.
	if !full || !rg.lapsed {
		c.floor = nextFloor(c.floor, rows, limit)
	}
}

func (c *streamClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	r := c.lease.r
	cctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	c.lease.mu.Lock()
	if ctx.Err() != nil { // cancelled while another claim ran
		c.lease.mu.Unlock()
		return nil, nil
	}
	sent := c.sent.take()
	start := time.Now()
	rg, sweep := c.next(start)
	rows, fenced, err := r.store.claim(cctx, owner, limit, rg, sent)
	took := time.Since(start)
	if err == nil {
		c.moved(rg, sweep, rows, limit, start, took)
	}
	c.lease.mu.Unlock()
	if err != nil {
		c.sent.add(sent...) // for the next claim, or on their own
		return nil, err
	}
	for i, sb := range sent {
		sb.ph.record = took
		c.sent.done(sb, fenced[i])
	}
	b := c.lease.leased(rows, owner)
	b.record = func(hard context.Context, owner string, out *outcome, res *BatchResult) (bool, error) {
		if len(out.sent) == len(rows) && len(rows) < sentBatchMax {
			c.sent.add(sentBatch{owner: owner, ids: out.sent, res: *res, ph: b.ph, topics: out.topics})
			return true, nil
		}
		return false, r.recordLeased(hard, owner, out, res)
	}
	return b, nil
}

package relay

import (
	"context"
	"time"
)

// The sweep finds what the stream's claims do not read: due pending rows
// below the claim floor and leases that lapsed before the claims' window
// (claim_floor.go). It used to be a claim from the bottom of both indexes
// in the claims' turn, and under a snapshot held for minutes, past a
// million dead entries, it stalled every claim for most of a second once
// a minute (docs/benchmarks.md#under-a-held-snapshot). Now a look reads
// them without locking anything, on its own goroutine and connection, and
// the claims after it take what it found by id.

// runLooks looks below the floor until ctx ends: at most every lapsedEvery,
// spaced by sweepEvery of the last look's duration, after a claim since
// the last look that left none of its rows to take (see floor).
func (c *streamClaims) runLooks(ctx context.Context) {
	due := time.Now()
	for c.awaitLook(ctx, due) {
		start := time.Now()
		found, full, err := c.look(ctx)
		took := time.Since(start)
		if err == nil {
			c.lease.r.log.Debug("looked below the claim floor", "found", found, "full", full, "duration", took)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.lease.r.log.Warn("looking below the claim floor failed; retrying", "error", err, "retry_in", sweepEvery(took))
			due = start.Add(sweepEvery(took))
		case full:
			due = start.Add(lapsedEvery)
		default:
			due = start.Add(sweepEvery(took))
		}
	}
}

// awaitLook waits until due, then for a claim after which no row of the
// last look is left to take. It returns false when ctx ends first.
func (c *streamClaims) awaitLook(ctx context.Context, due time.Time) bool {
	t := time.NewTimer(time.Until(due))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-c.claimed:
		}
		c.lease.mu.Lock()
		left := len(c.found)
		c.lease.mu.Unlock()
		if left == 0 {
			return true
		}
	}
}

// look reads what a sweep would take, below the floor as it is now, and
// leaves it for the next claims, waking one if it found anything. It
// holds no lock meanwhile: claims go on while it reads. It returns how
// many rows it found, and full when that was BatchSize of either kind.
func (c *streamClaims) look(ctx context.Context) (found int, full bool, err error) {
	c.lease.mu.Lock()
	from := c.floor
	c.lease.mu.Unlock()
	ids, full, err := c.lookBelow(ctx, from, c.lease.r.cfg.BatchSize)
	if err != nil {
		return 0, false, err
	}
	c.lease.mu.Lock()
	c.found = ids
	c.lease.mu.Unlock()
	if len(ids) > 0 {
		c.lease.r.turns.invite()
	}
	return len(ids), full, nil
}

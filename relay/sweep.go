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
// spaced by sweepEvery of the shortest recent look (lookCosts), after a claim since
// the last look that left none of its rows to take (see floor).
func (c *streamClaims) runLooks(ctx context.Context) {
	due := time.Now()
	var costs lookCosts
	for c.awaitLook(ctx, due) {
		start := time.Now()
		found, full, err := c.look(ctx)
		took := time.Since(start)
		costs.add(took)
		if err == nil {
			c.lease.p.log.Debug("looked below the claim floor", "found", found, "full", full, "duration", took)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.lease.p.log.Warn("looking below the claim floor failed; retrying", "error", err, "retry_in", costs.every())
			due = start.Add(costs.every())
		case full:
			due = start.Add(lapsedEvery)
		default:
			due = start.Add(costs.every())
		}
	}
}

// lookCosts keeps the durations of the last few looks. The looks are
// spaced by the shortest of them: a look's wall-clock time also counts
// the waits of a busy host, and one slow look (beside other work)
// must not put the next a half-minute off, while looks that are all slow
// (a snapshot held for minutes, past a million dead entries) still space
// themselves out to sweepMax.
type lookCosts struct {
	last [4]time.Duration
	n    int
}

// add records a look's duration.
func (l *lookCosts) add(took time.Duration) {
	l.last[l.n%len(l.last)] = took
	l.n++
}

// every is how long after a look the next one is due (sweepEvery of the
// shortest recent look).
func (l *lookCosts) every() time.Duration {
	shortest := l.last[0]
	for _, d := range l.last[1:min(l.n, len(l.last))] {
		shortest = min(shortest, d)
	}
	return sweepEvery(shortest)
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
	ids, full, err := c.lookBelow(ctx, from, c.lease.p.cfg.BatchSize)
	if err != nil {
		return 0, false, err
	}
	c.lease.mu.Lock()
	c.found = ids
	c.lease.mu.Unlock()
	if len(ids) > 0 {
		c.turns.invite()
	}
	return len(ids), full, nil
}

package relay

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrStopped is what Liveness returns once Run has returned.
var ErrStopped = errors.New("relay: Run has returned")

// liveness follows Run's claim loops: each unordered worker and each
// ordered loop has a slot holding the time of its last progress while it
// is inside a batch, and 0 while it waits (for rows, for its next poll,
// for the database or the sink to come back). Every step of a batch is
// bounded (a claim and a write-back by Lease, a publish by PublishTimeout
// plus ShutdownTimeout, then abandoned), so a slot that has not moved for
// longer than the sum of those bounds belongs to a loop that is stuck: a
// deadlock, or a call that ignores its deadline. Progress costs an atomic
// store per step of a batch.
type liveness struct {
	state   atomic.Int32   // livenessNew, livenessRunning, livenessStopped
	loops   []atomic.Int64 // the workers', then the ordered loops'
	workers int
	stall   time.Duration
}

const (
	livenessNew int32 = iota
	livenessRunning
	livenessStopped
)

// stallSlack is added to the sum of a batch's bounds before a loop counts
// as stalled: scheduling, a slow machine, a write-back's retries.
const stallSlack = time.Minute

func newLiveness(cfg Config) *liveness {
	return &liveness{
		loops:   make([]atomic.Int64, cfg.Workers+cfg.Ordering.Loops),
		workers: cfg.Workers,
		stall:   2*cfg.Lease + cfg.PublishTimeout + cfg.ShutdownTimeout + abandonAfter + stallSlack,
	}
}

// slot returns the progress slot of worker i.
func (l *liveness) slot(i int) *atomic.Int64 { return &l.loops[i] }

// orderedSlot returns the progress slot of ordered loop i.
func (l *liveness) orderedSlot(i int) *atomic.Int64 { return &l.loops[l.workers+i] }

// Liveness reports whether Run's claim loops are alive. It returns nil
// before Run is called and while Run runs, unless one of its claim loops
// (an unordered worker, or an ordered loop) has been inside one batch
// without progress (a claim returning, a publish returning, an outcome
// written) for longer than StallAfter: then an error naming the loop and
// how long. Waiting is not a stall: a relay waiting for rows, for an
// unreachable database or for a sink in an outage is alive. Once Run has
// returned it returns ErrStopped. It is cheap (a few atomic loads) and
// safe for concurrent use: a liveness probe can call it on every request.
// The retention janitor and the listener are not covered: a VACUUM may
// rightly take minutes.
func (r *Relay) Liveness() error {
	l := r.live
	switch l.state.Load() {
	case livenessNew:
		return nil
	case livenessStopped:
		return ErrStopped
	}
	now := time.Now()
	for i := range l.loops {
		since := l.loops[i].Load()
		if since == 0 {
			continue
		}
		if idle := now.Sub(time.Unix(0, since)); idle > l.stall {
			loop := fmt.Sprintf("worker %d", i)
			if i >= l.workers {
				loop = fmt.Sprintf("ordered loop %d", i-l.workers)
			}
			return fmt.Errorf("relay: %s has made no progress on its batch for %v (more than %v)", loop, idle.Round(time.Second), l.stall)
		}
	}
	return nil
}

// StallAfter is how long a claim loop may go without progress inside a
// batch before Liveness reports it: 2 x Lease + PublishTimeout +
// ShutdownTimeout + 0.5s (abandonAfter), plus a minute of slack (3m10.5s
// by default).
func (r *Relay) StallAfter() time.Duration { return r.live.stall }

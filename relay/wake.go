package relay

import (
	"context"
	"sync"
	"time"
)

// bell wakes the ordered claim loop when an insert into the table commits
// (the unordered workers share theirs through turns). A loop
// takes the current channel before it claims and waits on it afterwards, so
// a ring that arrives while it works is not missed: the channel is already
// closed when it starts to wait.
type bell struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBell() *bell { return &bell{ch: make(chan struct{})} }

// ring wakes every loop waiting on the current channel.
func (b *bell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// next returns the channel the next ring closes.
func (b *bell) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// idle waits d, or until woken is closed (and then reports true), or ctx
// ends.
func idle(ctx context.Context, d time.Duration, woken <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-woken:
		return true
	case <-t.C:
	}
	return false
}

// settleMin is the first re-check after a wake-up found no ordered row
// ready; see runOrdered.
const settleMin = 5 * time.Millisecond

// listen keeps a LISTEN session on the table's channel (migration 003) and
// rings the bell for every notification, and once each time it connects,
// for inserts committed while it was not listening. It has a connection of
// its own, outside the pool. While it cannot listen, polling carries on.
// It returns when ctx ends.
func (r *Relay) listen(ctx context.Context) {
	b := newExponential(r.cfg.OutageBackoffMin, r.cfg.OutageBackoffMax)
	failing := false
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, func() {
			if failing {
				r.log.Info("listening for notifications again")
				failing = false
			}
			b.Reset()
		})
		if ctx.Err() != nil {
			return
		}
		d := min(b.NextBackOff(), r.cfg.OutageBackoffMax)
		if !failing {
			r.log.Warn("notification listener lost; polling only until it is back", "error", err, "retry_in", d)
			failing = true
		}
		sleep(ctx, d)
	}
}

// listenOnce listens and rings until the connection fails or ctx ends;
// connected runs once the LISTEN took effect.
func (r *Relay) listenOnce(ctx context.Context, connected func()) error {
	return r.pg.listen(ctx, func() {
		connected()
		r.notified()
	}, r.notified)
}

// notified wakes the claim loops: an insert into the table committed.
func (r *Relay) notified() {
	r.bell.ring()
	r.turns.signal()
}

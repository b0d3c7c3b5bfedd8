package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
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

// settling is the ordered loop's looks after a wake-up that found no row
// ready: the first settleMin later, then doubling up to settleMax apart,
// for one poll interval; then every poll interval again.
type settling struct {
	next  time.Duration // the next wait; 0: not settling
	since time.Time     // the wake-up
}

const (
	settleMin = 5 * time.Millisecond
	settleMax = time.Second
)

// woken starts the looks after a wake-up at now.
func (s *settling) woken(now time.Time) { s.next, s.since = settleMin, now }

// wait returns how long to wait before the next look, at now, with the
// poll interval poll.
func (s *settling) wait(poll time.Duration, now time.Time) time.Duration {
	if s.next == 0 || now.Sub(s.since) >= poll {
		s.next = 0
		return poll
	}
	w := min(s.next, poll)
	s.next = min(2*s.next, settleMax)
	return w
}

// listener keeps a LISTEN session on the table's channel (migration 003)
// and calls wake for every notification, and once each time it connects,
// for inserts committed while it was not listening. It has a connection of
// its own, outside the pool. While it cannot listen, polling carries on.
type listener struct {
	db                     store.Listener
	backoffMin, backoffMax time.Duration // OutageBackoffMin, OutageBackoffMax
	log                    *slog.Logger
	wake                   func()
}

// loop listens until ctx ends.
func (l *listener) loop(ctx context.Context) {
	b := newExponential(l.backoffMin, l.backoffMax)
	failing := false
	for ctx.Err() == nil {
		err := l.db.Listen(ctx, func() {
			if failing {
				l.log.Info("listening for notifications again")
				failing = false
			}
			b.Reset()
			l.wake()
		}, l.wake)
		if ctx.Err() != nil {
			return
		}
		d := min(b.NextBackOff(), l.backoffMax)
		if !failing {
			l.log.Warn("notification listener lost; polling only until it is back", "error", err, "retry_in", d)
			failing = true
		}
		sleep(ctx, d)
	}
}

package relay

import (
	"context"
	"sync"
	"time"
)

// Shutdown is bounded: Run and ProcessBatch return within ShutdownTimeout
// + shutdownGrace of their context's cancellation, whatever the sink or
// the database does. The publish in flight gets ShutdownTimeout; recording
// its outcome (or giving its rows back) gets what is left of the grace.
// A statement the bound cuts short leaves its rows leased: they return to
// the other replicas when the lease ends.
const shutdownGrace = time.Second

// abandonAfter is how long a Publish call may go on after its context
// ended before the relay stops waiting for it. Its rows are then left
// leased, not given back: the sink may still be sending them.
const abandonAfter = 500 * time.Millisecond

// outlive returns a context for work that a cancellation of ctx must not
// cut short (a claim whose result would be lost, the write-back of an
// outcome) but that must still end d after ctx does. Call stop when the
// work is over.
func outlive(ctx context.Context, d time.Duration) (_ context.Context, stop func()) {
	hard, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
		done  bool
	)
	unregister := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			timer = time.AfterFunc(d, cancel)
		}
	})
	return hard, func() {
		unregister()
		mu.Lock()
		done = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// shutdownBound is outlive with the relay's bound: cfg.ShutdownTimeout +
// shutdownGrace after ctx ends.
func shutdownBound(ctx context.Context, cfg Config) (context.Context, func()) {
	return outlive(ctx, cfg.ShutdownTimeout+shutdownGrace)
}

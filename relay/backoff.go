package relay

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// retryDelay is the wait before the next attempt after a transient failure
// of attempt (1-based): lo doubled per attempt with ±50% jitter, never more
// than hi.
func retryDelay(attempt int, lo, hi time.Duration) time.Duration {
	b := newExponential(lo, hi)
	d := b.NextBackOff()
	for i := 1; i < attempt && i < 64; i++ {
		d = b.NextBackOff()
	}
	return min(d, hi)
}

// newExponential returns a backoff that never gives up.
func newExponential(lo, hi time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = lo
	b.MaxInterval = hi
	b.Multiplier = 2
	b.RandomizationFactor = 0.5
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// every calls f at once and then every d, plus up to a tenth of d at
// random so that replicas spread their runs, until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	for ctx.Err() == nil {
		f()
		sleep(ctx, d+rand.N(d/10+1))
	}
}

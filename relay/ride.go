package relay

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Sent rows ride on the next claim. In Run, a lease batch the sink took
// whole is not marked sent by a statement of its own: its rows wait, still
// processing under their lease, for the next claim, which marks them sent
// in its own transaction and round trip. In a busy stream that halves the
// relay's transactions (and their commits) per batch. When no claim starts
// within rideWait (a quiet table), the rows are marked sent on their own,
// as ProcessBatch always does. A crash before either publishes them again
// after their lease, as a crash between a publish and its record always
// could.

// rideWait is how long published rows wait for a claim to mark them sent.
const rideWait = 10 * time.Millisecond

// rideMax is the smallest batch that does not ride: it is marked sent at
// once, on a connection of its own, beside the next claim. A ride saves a
// transaction and a round trip, about the same whatever the batch, but
// adds the batch's mark-sent to the claim, which the relay's other workers
// wait for (Relay.claiming). In burn-downs riding was 7% faster with
// batches of 100 and 2-8% slower with batches of 1,000
// (docs/benchmarks.md#one-claim-at-a-time).
const rideMax = 500

// rider is a published batch whose rows are to be marked sent.
type rider struct {
	owner string      // the claim's token, which fences the write
	ids   []uuid.UUID // the rows the sink acknowledged
	res   BatchResult // the batch so far, for its log line
	ph    phases
}

// rides holds the riders waiting for a claim. A timer marks them sent on
// their own when none comes within rideWait.
type rides struct {
	after   time.Duration // rideWait, but for tests
	mu      sync.Mutex
	waiting []rider
	timer   *time.Timer // armed while riders wait
	flush   func()      // what the timer runs
	timers  sync.WaitGroup
}

func newRides(after time.Duration, flush func()) *rides { return &rides{after: after, flush: flush} }

// add queues riders; the first arms the timer.
func (q *rides) add(rs ...rider) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting = append(q.waiting, rs...)
	if q.timer == nil && len(q.waiting) > 0 {
		q.timers.Add(1)
		q.timer = time.AfterFunc(q.after, func() {
			defer q.timers.Done()
			q.flush()
		})
	}
}

// take returns the waiting riders and stops the timer: the caller now
// marks them.
func (q *rides) take() []rider {
	q.mu.Lock()
	defer q.mu.Unlock()
	rs := q.waiting
	q.waiting = nil
	if q.timer != nil && q.timer.Stop() {
		q.timers.Done() // its function will not run
	}
	q.timer = nil
	return rs
}

// waitTimers returns once no timer function is running.
func (q *rides) waitTimers() { q.timers.Wait() }

// markRiders marks the waiting riders' rows sent on their own statements,
// each retried until it succeeds, a lease has passed or ctx ends, and logs
// their batches.
func (r *Relay) markRiders(ctx context.Context) {
	for _, rd := range r.rides.take() {
		ctx, cancel := context.WithTimeout(ctx, r.cfg.Lease)
		start := time.Now()
		fenced, err := r.retryWrite(ctx, func(ctx context.Context) (int, error) { return r.store.markSent(ctx, rd.owner, rd.ids) })
		cancel()
		if err != nil {
			r.log.Error("recording sent rows failed; they are published again after their lease", "rows", len(rd.ids), "error", err)
			continue
		}
		rd.ph.record = time.Since(start)
		r.rode(rd, fenced)
	}
}

// rode completes the log of a rider whose rows are marked sent, fenced of
// them excepted.
func (r *Relay) rode(rd rider, fenced int) {
	rd.res.Sent = len(rd.ids) - fenced
	rd.res.Fenced += fenced
	r.logBatch(rd.res, rd.ph, nil, nil)
}

package relay

import (
	"context"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Mark-sent batching. In Run, a lease batch the sink took whole is not
// marked sent by a statement of its own: its rows wait, still processing
// under their lease, for the next claim, which marks them sent in its own
// transaction and round trip. In a busy stream that halves the relay's
// transactions (and their commits) per batch. When no claim starts within
// sentBatchWait (a quiet table), the rows are marked sent on their own, as
// ProcessBatch always does. A crash before either publishes them again
// after their lease, as a crash between a publish and its record always
// could.

// sentBatchWait is how long published rows wait for a claim to mark them
// sent.
const sentBatchWait = 10 * time.Millisecond

// sentBatchMax is the smallest batch that is not left to the next claim:
// it is marked sent at once, on a connection of its own, beside the next
// claim. Leaving it saves a transaction and a round trip, about the same
// whatever the batch, but adds the batch's mark-sent to the claim, which
// the relay's other workers wait for (leaseClaims.mu). In burn-downs it
// was faster with small batches and slower with batches of 1,000
// (docs/benchmarks.md).
const sentBatchMax = 500

// sentBatch is a published batch whose rows are to be marked sent.
type sentBatch struct {
	store.SentBatch             // the claim's token, the rows and where it left them (sentTIDs)
	res             BatchResult // the batch so far, for its log line
	ph              phases
	// topics counts the batch's rows by topic, for the Observer; nil
	// without one.
	topics *topicTally
}

// sentBatching holds the batches waiting for a claim to mark them sent. A
// timer marks them on their own when none comes within sentBatchWait.
type sentBatching struct {
	p       *pipeline     // the relay's: its store, Lease, write-back and log
	after   time.Duration // sentBatchWait, but for tests
	mu      sync.Mutex
	waiting []sentBatch
	timer   *time.Timer // armed while batches wait
	timers  sync.WaitGroup
}

func newSentBatching(p *pipeline, after time.Duration) *sentBatching {
	return &sentBatching{p: p, after: after}
}

// add queues batches; the first arms the timer.
func (q *sentBatching) add(bs ...sentBatch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting = append(q.waiting, bs...)
	if q.timer == nil && len(q.waiting) > 0 {
		q.timers.Add(1)
		q.timer = time.AfterFunc(q.after, func() {
			defer q.timers.Done()
			q.flush(context.Background())
		})
	}
}

// take returns the waiting batches and stops the timer: the caller now
// marks them.
func (q *sentBatching) take() []sentBatch {
	q.mu.Lock()
	defer q.mu.Unlock()
	bs := q.waiting
	q.waiting = nil
	if q.timer != nil && q.timer.Stop() {
		q.timers.Done() // its function will not run
	}
	q.timer = nil
	return bs
}

// waitTimers returns once no timer function is running.
func (q *sentBatching) waitTimers() { q.timers.Wait() }

// flush marks the waiting batches' rows sent on their own statements, each
// retried until it succeeds, a lease has passed or ctx ends, and logs the
// batches.
func (q *sentBatching) flush(ctx context.Context) {
	p := q.p
	for _, sb := range q.take() {
		ctx, cancel := context.WithTimeout(ctx, p.cfg.Lease)
		start := time.Now()
		fenced, err := p.retryWrite(ctx, func(ctx context.Context) (int, error) { return p.store.MarkSent(ctx, sb.Owner, sb.IDs, sb.TIDs) })
		cancel()
		if err != nil {
			p.log.Error("recording sent rows failed; they are published again after their lease", "rows", len(sb.IDs), "error", err)
			continue
		}
		sb.ph.record = time.Since(start)
		q.done(sb, fenced)
	}
}

// done logs a batch whose rows are marked sent, fenced of them excepted.
func (q *sentBatching) done(sb sentBatch, fenced int) {
	sb.res.Sent = len(sb.IDs) - fenced
	sb.res.Fenced += fenced
	q.p.logBatch(sb.res, sb.ph, nil, nil, sb.topics)
}

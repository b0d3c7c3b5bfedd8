package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// recordLeased writes the outcome of a lease claim back, fenced by
// owner, and counts it in res; tids are the sent rows' tuple ids, or nil
// (sentTIDs).
// hard is the batch's shutdown bound (shutdownBound), not a context that a
// shutdown cancels. The write-back gets its own deadline, a lease from
// now: the publish may have run longer than a lease while the heartbeat
// kept the rows.
func (p *pipeline) recordLeased(hard context.Context, owner string, tids []store.TID, out *outcome, res *BatchResult) error {
	wctx, cancel := context.WithTimeout(hard, p.cfg.Lease)
	defer cancel()
	steps := []struct {
		what  string
		count *int
		n     int
		do    func(context.Context) (int, error)
	}{
		{"sent", &res.Sent, len(out.Sent), func(ctx context.Context) (int, error) { return p.store.MarkSent(ctx, owner, out.Sent, tids) }},
		{"retry", &res.Retried, len(out.Retries), func(ctx context.Context) (int, error) { return p.store.MarkRetry(ctx, owner, out.Retries) }},
		{"failed", &res.Failed, len(out.Failures), func(ctx context.Context) (int, error) { return p.store.MarkFailed(ctx, owner, out.Failures) }},
		{"release", &res.Released, len(out.released), func(ctx context.Context) (int, error) { return p.store.Release(ctx, owner, out.released) }},
	}
	for _, step := range steps {
		fenced, err := p.retryWrite(wctx, step.do)
		if err != nil {
			return fmt.Errorf("record outcome (%s) of %d claimed rows: %w; they return after the lease", step.what, res.Claimed, err)
		}
		*step.count = step.n - fenced
		res.Fenced += fenced
	}
	return nil
}

// count sets the outcome counts of res from a write-back of out that
// wrote got.
func (res *BatchResult) count(got store.Recorded, out *outcome) {
	res.Sent, res.Retried, res.Failed = got.Sent, got.Retried, got.Failed
	res.Released = len(out.released)
	res.Fenced += len(out.Sent) + len(out.Retries) + len(out.Failures) - got.Sent - got.Retried - got.Failed
}

// retryWrite runs a write-back until it succeeds or ctx (bounded by the
// lease) ends: a failed write-back would make the rows publish twice.
func (p *pipeline) retryWrite(ctx context.Context, do func(context.Context) (int, error)) (int, error) {
	b := newExponential(50*time.Millisecond, 2*time.Second)
	for {
		fenced, err := do(ctx)
		if err == nil || ctx.Err() != nil {
			return fenced, err
		}
		d := b.NextBackOff()
		p.log.Warn("recording outcome failed; retrying", "error", err, "retry_in", d)
		sleep(ctx, d)
	}
}

// logBatch logs a batch whose outcome is recorded, and reports it to the
// Observer.
func (p *pipeline) logBatch(res BatchResult, ph phases, retries []store.Retry, failures []store.Failure, topics *topicTally) {
	p.observe(Event{Kind: EventRecorded, Claim: ph.mode, Result: res, Duration: ph.record, Topics: topics.result(res)})
	p.log.Debug("batch done", "claimed", res.Claimed, "sent", res.Sent, "retried", res.Retried,
		"failed", res.Failed, "released", res.Released, "fenced", res.Fenced, "abandoned", res.Abandoned,
		"claim_ms", ms(ph.claim), "publish_ms", ms(ph.publish), "record_ms", ms(ph.record))
	if len(retries) > 0 && !res.SinkUnavailable { // Run logs an outage once, not every probe
		p.log.Warn("publish failed; will retry", "rows", len(retries), "first_id", retries[0].ID, "error", retries[0].Error, "retry_in", retries[0].Delay)
	}
	for _, f := range failures {
		p.log.Error("event failed permanently", "id", f.ID, "reason", f.Error)
	}
	if res.Fenced > 0 {
		p.log.Warn("outcome not recorded for rows another claim holds now (lease lost)", "rows", res.Fenced)
	}
}

// phases are how long a batch's claim statement, publishing (every round,
// in ordered mode) and recording took, for the debug log.
type phases struct {
	mode                   ClaimMode // ClaimLease, ClaimLock or ClaimOrdered
	claim, publish, record time.Duration
}

// ms is d in milliseconds, for logs.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

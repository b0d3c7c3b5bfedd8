package relay

import (
	"errors"
	"fmt"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// classify decides each published message's outcome from its result (see
// ProcessBatch), keeps the relay's outage state, and reports whether the
// sink is down and which messages are finished (sent, or failed for good).
// With park (HeadOfLinePark), a transient failure fails its message at once.
func (p *pipeline) classify(msgs []outbox.Message, results []error, cut publishCut, park bool, out *outcome, res *BatchResult) (down bool, finished []bool) {
	if cut == publishAbandoned {
		// No outcome: the sink may still be sending them. They keep
		// their lease.
		res.Abandoned += len(msgs)
		for _, m := range msgs {
			out.topics.add(m.Topic, tallyAbandoned, 1)
		}
		return false, make([]bool, len(msgs))
	}
	interrupted := cut == publishInterrupted
	down = !interrupted && sinkDown(results, p.sink.inOutage())
	sent, answered, deferred, cause := false, false, 0, ""
	finished = make([]bool, len(msgs))
	for i, msg := range msgs {
		failed, retried := len(out.Failures), len(out.Retries)
		switch err := results[i]; {
		case err == nil:
			out.Sent = append(out.Sent, msg.ID)
			sent, finished[i] = true, true
		case interrupted:
			out.released = append(out.released, msg.ID)
		case publishers.IsPermanent(err):
			out.Failures = append(out.Failures, store.Failure{ID: msg.ID, Error: publishers.Describe(err)})
			answered = true // an answer about the message: the sink works
		case down:
			// Due at once: no loop claims it before the sink answers.
			out.Retries = append(out.Retries, store.Retry{ID: msg.ID, Error: publishers.Describe(err), Refund: true})
			deferred++
			if cause == "" {
				cause = publishers.Describe(err)
			}
		case errors.Is(err, publishers.ErrUnavailable):
			out.Retries = append(out.Retries, store.Retry{ID: msg.ID, Delay: p.cfg.BackoffMin, Error: publishers.Describe(err), Refund: true})
		case park:
			out.Failures = append(out.Failures, store.Failure{ID: msg.ID, Error: "parked: " + publishers.Describe(err)})
		case msg.Attempt >= p.cfg.MaxAttempts:
			out.Failures = append(out.Failures, store.Failure{ID: msg.ID, Error: fmt.Sprintf("attempt %d of %d: %s", msg.Attempt, p.cfg.MaxAttempts, publishers.Describe(err))})
		default:
			delay := retryDelay(msg.Attempt, p.cfg.BackoffMin, p.cfg.BackoffMax)
			if after, ok := publishers.RetryAfterOf(err); ok {
				// The destination said when: wait that long, within
				// BackoffMax.
				delay = min(max(delay, after), p.cfg.BackoffMax)
			}
			out.Retries = append(out.Retries, store.Retry{ID: msg.ID, Delay: delay, Error: publishers.Describe(err)})
		}
		switch {
		case len(out.Failures) > failed:
			finished[i] = true // failed for good
			out.topics.add(msg.Topic, tallyFailed, 1)
		case len(out.Retries) > retried:
			out.topics.add(msg.Topic, tallyRetried, 1)
		case results[i] == nil:
			out.topics.add(msg.Topic, tallySent, 1)
		default: // interrupted by shutdown
			out.topics.add(msg.Topic, tallyReleased, 1)
		}
	}
	if down {
		res.SinkUnavailable = true
		res.Backoff = p.sink.wentDown(cause, deferred)
	}
	if sent || answered && !down {
		p.sink.answered()
	}
	return down, finished
}

// sinkDown reports whether a batch's results say the sink is down rather
// than that some messages are bad: nothing was acknowledged, and either the
// sink said it is unavailable, or several messages all failed transiently,
// or one did while the sink was already down (a probe). Otherwise a lone
// transient failure is charged to its message, so that an event the sink
// keeps refusing still reaches failed after MaxAttempts.
func sinkDown(results []error, alreadyDown bool) bool {
	unavailable, transient := false, 0
	for _, err := range results {
		switch {
		case err == nil:
			return false
		case errors.Is(err, publishers.ErrUnavailable):
			unavailable = true
		case !publishers.IsPermanent(err):
			transient++
		}
	}
	return unavailable || transient >= 2 || alreadyDown && transient > 0
}

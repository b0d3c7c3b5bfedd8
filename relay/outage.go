package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// Sink outages (the breaker). When a batch's results say the sink as a whole
// is down (sinkDown), the relay enters an outage: its rows go back to
// pending, due at once and without spending an attempt, and no loop claims
// rows until the sink answers again. A sink that implements publishers.Prober
// is probed every ProbeInterval by breaker.watch, which publishes nothing;
// the first answer wakes every loop (see trials below). Other sinks are
// probed by the first unordered worker with one-row batches, OutageBackoffMin
// doubling up to OutageBackoffMax apart. One WARN starts an outage, one more
// comes every outageWarnEvery while it lasts, and one INFO ends it.
//
// A probe that gets an answer does not end the outage by itself: the
// loops claim again, on trial, and the outage ends when the sink takes a
// message (or refuses one for a reason of its own, or there is nothing to
// publish). A sink that answers probes but still refuses every message
// (Kafka's NOT_ENOUGH_REPLICAS, say) falls back into the same outage: no
// new WARN, and the wait before the next trial doubles per such trial, up
// to maxTrialWaits probe intervals (2s by default), so that such a sink
// gets a batch every few seconds rather than four a second, and is back
// within that long once it takes messages again.

// outageWarnEvery is how often a lasting outage is logged again.
const outageWarnEvery = 30 * time.Second

// probeTimeout bounds one Probe call.
const probeTimeout = 2 * time.Second

// maxTrialWaits bounds the wait between trials, in probe intervals.
const maxTrialWaits = 8

// waitingCap bounds the count of due rows an outage warning reports, so
// that counting costs no more than reading that many index entries.
const waitingCap = 100000

// breaker is the relay's view of its sink, shared by every loop: up, down
// since when, or on trial.
type breaker struct {
	log        *slog.Logger
	probeEvery time.Duration                           // ProbeInterval
	backoffMax time.Duration                           // OutageBackoffMax
	countDue   func(context.Context, int) (int, error) // due rows, up to a limit
	observe    func(Event)                             // the relay's Observer
	wake       func()                                  // makes every claim loop look for rows

	mu       sync.Mutex
	down     bool
	trial    bool      // a probe got an answer; the loops claim again, the outage not yet over
	trials   int       // trials that fell back into the outage
	since    time.Time // when the outage started
	last     string    // the latest error it gave
	deferred int       // rows given back because of it
	warned   time.Time // when it was last logged
	// changed is closed and replaced whenever down changes.
	changed chan struct{}
	// probes spaces one-row probes of sinks without publishers.Prober, and
	// grows with each consecutive outage batch.
	probes *backoff.ExponentialBackOff
}

// newBreaker returns the breaker of a relay with cfg.
func newBreaker(cfg Config, log *slog.Logger, countDue func(context.Context, int) (int, error), observe func(Event), wake func()) *breaker {
	return &breaker{
		log:        log,
		observe:    observe,
		probeEvery: cfg.ProbeInterval,
		backoffMax: cfg.OutageBackoffMax,
		countDue:   countDue,
		wake:       wake,
		changed:    make(chan struct{}),
		probes:     newExponential(cfg.OutageBackoffMin, cfg.OutageBackoffMax),
	}
}

// state reports whether the sink is down and a channel closed at the next
// change.
func (b *breaker) state() (down bool, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.down, b.changed
}

// isDown reports whether the sink was found down and has not answered
// since.
func (b *breaker) isDown() bool {
	down, _ := b.state()
	return down
}

// inOutage reports whether the sink is down, or on trial after a probe.
func (b *breaker) inOutage() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.down || b.trial
}

// await waits until the sink's state is up (down false) or down (true), or
// ctx ends.
func (b *breaker) await(ctx context.Context, down bool) {
	for {
		now, changed := b.state()
		if now == down {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// trialCount returns how many trials fell back into the current outage.
func (b *breaker) trialCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.trials
}

// wentDown records that a batch found the sink down, deferring deferred
// rows because of it; the first such batch starts the outage and is
// logged. It returns the wait before a one-row probe.
func (b *breaker) wentDown(cause string, deferred int) time.Duration {
	b.mu.Lock()
	wait := min(b.probes.NextBackOff(), b.backoffMax)
	switch {
	case b.down:
		b.deferred += deferred
		b.last = cause
		b.mu.Unlock()
		return wait
	case b.trial: // the same outage goes on
		b.down, b.trial = true, false
		b.trials++
		b.deferred += deferred
		b.last = cause
		b.changedLocked()
		b.mu.Unlock()
		return wait
	}
	now := time.Now()
	b.down, b.since, b.last, b.deferred, b.warned = true, now, cause, deferred, now
	b.changedLocked()
	b.mu.Unlock()
	b.log.Warn("sink unavailable; pausing claims until it answers", "error", cause, "deferred", deferred)
	b.observe(Event{Kind: EventOutageStarted, Err: cause, Rows: deferred})
	return wait
}

// answered ends the outage, if there is one: the sink acknowledged a
// message, or answered one with an error of the message's own. Every loop
// claims again at once.
func (b *breaker) answered() {
	b.mu.Lock()
	if !b.down && !b.trial {
		b.mu.Unlock()
		return
	}
	b.endLocked()
}

// endTrial ends an outage that is on trial, and nothing else: a worker
// found nothing to publish and no batch in flight.
func (b *breaker) endTrial() {
	b.mu.Lock()
	if !b.trial {
		b.mu.Unlock()
		return
	}
	b.endLocked()
}

// endLocked ends the outage, logs it and unlocks b.mu.
func (b *breaker) endLocked() {
	wasDown := b.down
	took, deferred := time.Since(b.since), b.deferred
	b.down, b.trial, b.trials, b.last, b.deferred = false, false, 0, "", 0
	b.probes.Reset()
	if wasDown {
		b.changedLocked()
	}
	b.mu.Unlock()
	b.log.Info("sink answers again; resuming", "outage", took.Round(time.Millisecond), "deferred", deferred)
	b.observe(Event{Kind: EventOutageEnded, Duration: took, Rows: deferred})
	if wasDown {
		b.wake()
	}
}

// probed puts an outage on trial: a probe got an answer, so the loops
// claim again, and the next batch ends the outage or resumes it.
func (b *breaker) probed() {
	b.mu.Lock()
	if !b.down {
		b.mu.Unlock()
		return
	}
	b.down, b.trial = false, true
	b.changedLocked()
	b.mu.Unlock()
	b.log.Debug("sink answers probes; claiming again on trial")
	b.wake()
}

// changedLocked wakes the waiters of await. b.mu is held.
func (b *breaker) changedLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// trialWait is how long watch waits before probing again: one
// ProbeInterval, doubling per trial that fell back into the outage, up to
// maxTrialWaits of them.
func (b *breaker) trialWait() time.Duration {
	return b.probeEvery * time.Duration(min(1<<min(b.trialCount(), 10), maxTrialWaits))
}

// warn logs a lasting outage again, at most every outageWarnEvery: its
// length, its latest error and how many rows are due meanwhile.
func (b *breaker) warn(ctx context.Context) {
	b.mu.Lock()
	if !b.down && !b.trial || time.Since(b.warned) < outageWarnEvery {
		b.mu.Unlock()
		return
	}
	b.warned = time.Now()
	took, deferred, last := time.Since(b.since), b.deferred, b.last
	b.mu.Unlock()
	args := []any{"outage", took.Round(time.Second), "error", last, "deferred", deferred}
	cctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if n, err := b.countDue(cctx, waitingCap); err == nil {
		if n >= waitingCap {
			args = append(args, "rows_waiting", ">= 100000")
		} else {
			args = append(args, "rows_waiting", n)
		}
	}
	b.log.Warn("sink still unavailable", args...)
}

// watch probes a publishers.Prober sink every ProbeInterval (trialWait) while
// it is down and puts the outage on trial when it answers. Run runs it for
// publishers.Prober sinks only.
func (b *breaker) watch(ctx context.Context, p publishers.Prober) {
	for ctx.Err() == nil {
		b.await(ctx, true)
		for ctx.Err() == nil && b.isDown() {
			b.warn(ctx)
			sleep(ctx, b.trialWait())
			if ctx.Err() != nil {
				return
			}
			err := probe(ctx, p)
			if err == nil {
				b.probed()
				break
			}
			b.log.Debug("sink probe failed", "error", err)
			b.mu.Lock()
			b.last = err.Error()
			b.mu.Unlock()
		}
	}
}

// check logs at start-up whether the sink answers; one that does not
// starts the relay in an outage, so that no row is claimed before it does.
func (b *breaker) check(ctx context.Context, p publishers.Prober) {
	if err := probe(ctx, p); err != nil {
		if ctx.Err() == nil {
			b.wentDown(err.Error(), 0)
		}
		return
	}
	b.log.Info("sink reachable")
}

// probe asks the sink once whether it answers, within probeTimeout.
func probe(ctx context.Context, p publishers.Prober) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return p.Probe(pctx)
}

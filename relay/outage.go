package relay

import (
	"context"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Sink outages. When a batch's results say the sink as a whole is down
// (sinkDown), the relay enters an outage: its rows go back to pending,
// due at once and without spending an attempt, and no loop claims rows
// until the sink answers again. A sink that implements Prober is probed
// every ProbeInterval by watchSink, which publishes nothing; the first
// answer wakes every loop (see trials below). Other sinks are probed by
// the first unordered worker with one-row batches, OutageBackoffMin
// doubling up to OutageBackoffMax apart. One WARN starts an outage, one
// more comes every outageWarnEvery while it lasts, and one INFO ends it.
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

// sinkState is the relay's view of its sink, shared by every loop.
type sinkState struct {
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
	// probes spaces one-row probes of sinks without Prober, and grows
	// with each consecutive outage batch.
	probes *backoff.ExponentialBackOff
}

// state reports whether the sink is down and a channel closed at the next
// change.
func (s *sinkState) state() (down bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down, s.changed
}

// sinkIsDown reports whether the sink was found down and has not answered
// since.
func (r *Relay) sinkIsDown() bool {
	down, _ := r.sink.state()
	return down
}

// awaitSink waits until the sink's state is up (down false) or down (true),
// or ctx ends.
func (r *Relay) awaitSink(ctx context.Context, down bool) {
	for {
		now, changed := r.sink.state()
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
func (s *sinkState) trialCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trials
}

// inOutage reports whether the sink is down, or on trial after a probe.
func (r *Relay) inOutage() bool {
	r.sink.mu.Lock()
	defer r.sink.mu.Unlock()
	return r.sink.down || r.sink.trial
}

// sinkWentDown records that a batch found the sink down, deferring
// deferred rows because of it; the first such batch starts the outage and
// is logged. It returns the wait before a one-row probe.
func (r *Relay) sinkWentDown(cause string, deferred int) time.Duration {
	s := &r.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := min(s.probes.NextBackOff(), r.cfg.OutageBackoffMax)
	switch {
	case s.down:
		s.deferred += deferred
		s.last = cause
		return wait
	case s.trial: // the same outage goes on
		s.down, s.trial = true, false
		s.trials++
		s.deferred += deferred
		s.last = cause
		close(s.changed)
		s.changed = make(chan struct{})
		return wait
	}
	now := time.Now()
	s.down, s.since, s.last, s.deferred, s.warned = true, now, cause, deferred, now
	close(s.changed)
	s.changed = make(chan struct{})
	r.log.Warn("sink unavailable; pausing claims until it answers", "error", cause, "deferred", deferred)
	return wait
}

// sinkAnswered ends the outage, if there is one: the sink acknowledged a
// message, or answered one with an error of the message's own, or a trial
// found nothing to publish. Every loop claims again at once.
func (r *Relay) sinkAnswered() {
	s := &r.sink
	s.mu.Lock()
	if !s.down && !s.trial {
		s.mu.Unlock()
		return
	}
	r.endOutageLocked()
}

// endTrial ends an outage that is on trial, and nothing else: a worker
// found nothing to publish and no batch in flight.
func (r *Relay) endTrial() {
	s := &r.sink
	s.mu.Lock()
	if !s.trial {
		s.mu.Unlock()
		return
	}
	r.endOutageLocked()
}

// endOutageLocked ends the outage, logs it and unlocks r.sink.mu.
func (r *Relay) endOutageLocked() {
	s := &r.sink
	wasDown := s.down
	took, deferred := time.Since(s.since), s.deferred
	s.down, s.trial, s.trials, s.last, s.deferred = false, false, 0, "", 0
	s.probes.Reset()
	if wasDown {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
	r.log.Info("sink answers again; resuming", "outage", took.Round(time.Millisecond), "deferred", deferred)
	if wasDown {
		r.wakeLoops()
	}
}

// sinkProbed puts an outage on trial: a probe got an answer, so the loops
// claim again, and the next batch ends the outage or resumes it.
func (r *Relay) sinkProbed() {
	s := &r.sink
	s.mu.Lock()
	if !s.down {
		s.mu.Unlock()
		return
	}
	s.down, s.trial = false, true
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	r.log.Debug("sink answers probes; claiming again on trial")
	r.wakeLoops()
}

// wakeLoops makes every claim loop look for rows at once.
func (r *Relay) wakeLoops() {
	r.bell.ring()
	r.turns.signal()
}

// trialWait is how long watchSink waits before probing again: one
// ProbeInterval, doubling per trial that fell back into the outage, up to
// maxTrialWaits of them.
func (r *Relay) trialWait() time.Duration {
	n := r.sink.trialCount()
	return r.cfg.ProbeInterval * time.Duration(min(1<<min(n, 10), maxTrialWaits))
}

// warnOutage logs a lasting outage again, at most every outageWarnEvery:
// its length, its latest error and how many rows are due meanwhile.
func (r *Relay) warnOutage(ctx context.Context) {
	s := &r.sink
	s.mu.Lock()
	if !s.down && !s.trial || time.Since(s.warned) < outageWarnEvery {
		s.mu.Unlock()
		return
	}
	s.warned = time.Now()
	took, deferred, last := time.Since(s.since), s.deferred, s.last
	s.mu.Unlock()
	args := []any{"outage", took.Round(time.Second), "error", last, "deferred", deferred}
	cctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if n, err := r.store.countDue(cctx, waitingCap); err == nil {
		if n >= waitingCap {
			args = append(args, "rows_waiting", ">= 100000")
		} else {
			args = append(args, "rows_waiting", n)
		}
	}
	r.log.Warn("sink still unavailable", args...)
}

// watchSink probes a Prober sink every ProbeInterval (trialWait) while it
// is down and puts the outage on trial when it answers. Run runs it for
// Prober sinks only.
func (r *Relay) watchSink(ctx context.Context, p Prober) {
	for ctx.Err() == nil {
		r.awaitSink(ctx, true)
		for ctx.Err() == nil && r.sinkIsDown() {
			r.warnOutage(ctx)
			sleep(ctx, r.trialWait())
			if ctx.Err() != nil {
				return
			}
			err := r.probe(ctx, p)
			if err == nil {
				r.sinkProbed()
				break
			}
			r.log.Debug("sink probe failed", "error", err)
			r.sink.mu.Lock()
			r.sink.last = err.Error()
			r.sink.mu.Unlock()
		}
	}
}

// probe asks the sink once whether it answers, within probeTimeout.
func (r *Relay) probe(ctx context.Context, p Prober) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return p.Probe(pctx)
}

// checkSink logs at start-up whether the sink answers; one that does not
// starts the relay in an outage, so that no row is claimed before it does.
func (r *Relay) checkSink(ctx context.Context, p Prober) {
	if err := r.probe(ctx, p); err != nil {
		if ctx.Err() == nil {
			r.sinkWentDown(err.Error(), 0)
		}
		return
	}
	r.log.Info("sink reachable")
}

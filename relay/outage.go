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
// answer ends the outage and wakes every loop. Other sinks are probed by
// the first unordered worker with one-row batches, OutageBackoffMin
// doubling up to OutageBackoffMax apart. One WARN starts an outage, one
// more comes every outageWarnEvery while it lasts, and one INFO ends it.

// outageWarnEvery is how often a lasting outage is logged again.
const outageWarnEvery = 30 * time.Second

// probeTimeout bounds one Probe call.
const probeTimeout = 2 * time.Second

// waitingCap bounds the count of due rows an outage warning reports, so
// that counting costs no more than reading that many index entries.
const waitingCap = 100000

// sinkState is the relay's view of its sink, shared by every loop.
type sinkState struct {
	mu       sync.Mutex
	down     bool
	since    time.Time // when the outage started
	cause    string    // the error that started it
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

// sinkWentDown records that a batch found the sink down, deferring
// deferred rows because of it; the first such batch starts the outage and
// is logged. It returns the wait before a one-row probe.
func (r *Relay) sinkWentDown(cause string, deferred int) time.Duration {
	s := &r.sink
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := min(s.probes.NextBackOff(), r.cfg.OutageBackoffMax)
	if s.down {
		s.deferred += deferred
		s.last = cause
		return wait
	}
	now := time.Now()
	s.down, s.since, s.cause, s.last, s.deferred, s.warned = true, now, cause, cause, deferred, now
	close(s.changed)
	s.changed = make(chan struct{})
	r.log.Warn("sink unavailable; pausing claims until it answers", "error", cause, "deferred", deferred)
	return wait
}

// sinkAnswered ends the outage, if there is one: the sink acknowledged a
// message, answered a probe, or answered a one-row probe with an error of
// the message's own. Every loop claims again at once.
func (r *Relay) sinkAnswered() {
	s := &r.sink
	s.mu.Lock()
	if !s.down {
		s.mu.Unlock()
		return
	}
	took, deferred := time.Since(s.since), s.deferred
	s.down, s.cause, s.last, s.deferred = false, "", "", 0
	s.probes.Reset()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	r.log.Info("sink answers again; resuming", "outage", took.Round(time.Millisecond), "deferred", deferred)
	r.bell.ring()
	r.turns.signal() // rows wait: a worker claims at once
}

// warnOutage logs a lasting outage again, at most every outageWarnEvery:
// its length, its latest error and how many rows are due meanwhile.
func (r *Relay) warnOutage(ctx context.Context) {
	s := &r.sink
	s.mu.Lock()
	if !s.down || time.Since(s.warned) < outageWarnEvery {
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

// watchSink probes a Prober sink every ProbeInterval while it is down and
// ends the outage when it answers. Run runs it for Prober sinks only.
func (r *Relay) watchSink(ctx context.Context, p Prober) {
	for ctx.Err() == nil {
		r.awaitSink(ctx, true)
		for ctx.Err() == nil && r.sinkIsDown() {
			sleep(ctx, r.cfg.ProbeInterval)
			if ctx.Err() != nil {
				return
			}
			err := r.probe(ctx, p)
			if err == nil {
				r.sinkAnswered()
				break
			}
			r.log.Debug("sink probe failed", "error", err)
			r.sink.mu.Lock()
			r.sink.last = err.Error()
			r.sink.mu.Unlock()
			r.warnOutage(ctx)
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

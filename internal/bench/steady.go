package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// steady starts a consumer on the topic and the relays, then writes
// cfg.Rate events per second for cfg.Duration, each in its own
// transaction, and measures each event's latency from its commit's return
// to its arrival, both on this process's clock.
func (r *runner) steady(ctx context.Context) error {
	a, stopConsumer, err := r.startFollowing(ctx)
	if err != nil {
		return err
	}
	defer stopConsumer() //nolint:errcheck // error paths; finishFollowing checks it
	defer r.abort()
	release, err := r.holdSnapshot(ctx)
	if err != nil {
		return err
	}
	defer release()
	r.startSampler(ctx)
	fmt.Fprintf(r.cfg.Progress, "steady: %d relays: writing %d events/s for %v\n", r.relays, r.cfg.Rate, r.cfg.Duration)
	start := time.Now()
	b, err := r.startBurst(ctx, start)
	if err != nil {
		return err
	}
	if b != nil {
		fmt.Fprintf(r.cfg.Progress, "steady: a burst of %d events at %v\n", r.cfg.Burst, r.cfg.BurstAt)
	}
	writes, elapsed, err := writeSteadyFrom(ctx, r.pool, r.table, r.topic, r.cfg, start)
	if err != nil {
		return err
	}
	if err := r.awaitBurstSent(ctx, b); err != nil {
		return err
	}
	if err := r.finishFollowing(ctx, a, writes, elapsed, stopConsumer); err != nil {
		return err
	}
	if err := r.summarizeBurst(ctx, b, start, writes, a); err != nil {
		return err
	}
	return r.recordSentAndAfter(ctx)
}

// startFollowing begins a steady-state run (steady and soak): it vacuums
// and records the table, starts a consumer into a new arrivals log and the
// relays, and waits until both are ready. The caller defers stop (the
// consumer's) and r.abort().
func (r *runner) startFollowing(ctx context.Context) (a *arrivals, stop func() error, err error) {
	if err := vacuumAnalyze(ctx, r.pool, r.table); err != nil {
		return nil, nil, err
	}
	if err := r.recordBefore(ctx); err != nil {
		return nil, nil, err
	}
	a = newArrivals(min(r.cfg.Rate*int(r.cfg.Duration/time.Second+1), 1<<20))
	stop, ready, errc := r.follow(ctx, a)
	if err := r.startRelays(); err != nil {
		stop() //nolint:errcheck // the start error is the one to report
		return nil, nil, err
	}
	if err := r.procs.awaitReady(ctx); err == nil {
		err = awaitSignal(ctx, ready, errc)
	}
	if err != nil {
		r.abort()
		stop() //nolint:errcheck // the start error is the one to report
		return nil, nil, err
	}
	return a, stop, nil
}

// finishFollowing ends a steady-state run once its writers are done: it
// waits for their events to arrive, stops the relays and the consumer, and
// summarizes the latencies.
func (r *runner) finishFollowing(ctx context.Context, a *arrivals, writes []write, elapsed time.Duration, stopConsumer func() error) error {
	if err := r.awaitArrivals(ctx, a, len(writes)); err != nil {
		return err
	}
	if err := r.stopRelays(ctx); err != nil {
		return err
	}
	if err := stopConsumer(); err != nil {
		return err
	}
	r.summarizeSteady(writes, elapsed, a)
	return nil
}

// recordSentAndAfter counts the sent rows and reads the table's health
// after the relays exited.
func (r *runner) recordSentAndAfter(ctx context.Context) error {
	counts, err := statusCounts(ctx, r.pool, r.table)
	if err != nil {
		return err
	}
	r.res.Sent = counts["sent"]
	return r.recordAfter(ctx)
}

// follow reads the topic into a until the returned stop is called; stop
// returns the consumer's error and may be called more than once. ready is
// closed once every partition answered a first fetch; errc receives the
// consumer's error if it fails.
func (r *runner) follow(ctx context.Context, a *arrivals) (stop func() error, ready <-chan struct{}, errc <-chan error) {
	ctx, cancel := context.WithCancel(ctx)
	readyc := make(chan struct{})
	errch := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.sink.read(ctx, r.topic, true, a, func() { close(readyc) }); err != nil {
			errch <- fmt.Errorf("consumer: %w", err)
		}
	}()
	stop = sync.OnceValue(func() error {
		cancel()
		<-done
		select {
		case err := <-errch:
			return err
		default:
			return nil
		}
	})
	return stop, readyc, errch
}

// awaitSignal waits for ready, failing on errc or ctx.
func awaitSignal(ctx context.Context, ready <-chan struct{}, errc <-chan error) error {
	select {
	case <-ready:
		return nil
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitArrivals waits until n distinct events arrived, or cfg.Grace passed.
func (r *runner) awaitArrivals(ctx context.Context, a *arrivals, n int) error {
	grace := time.NewTimer(r.cfg.Grace)
	defer grace.Stop()
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	for {
		if distinct, _ := a.counts(); distinct >= n {
			return nil
		}
		select {
		case <-a.notify:
		case <-check.C:
			if err := r.procs.exited(); err != nil {
				return err
			}
		case <-grace.C:
			return nil // what did not arrive is missing
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// summarizeSteady fills the steady fields of the Result.
func (r *runner) summarizeSteady(writes []write, elapsed time.Duration, a *arrivals) {
	st := &SteadyStats{TargetRate: r.cfg.Rate}
	interval := time.Duration(float64(time.Second) * float64(r.cfg.Writers) / float64(r.cfg.Rate))
	var latency, commit []float64
	ids := make([]uuid.UUID, len(writes))
	for i, w := range writes {
		ids[i] = w.id
		commit = append(commit, ms(w.took))
		st.MaxLagMS = max(st.MaxLagMS, ms(w.lag))
		if w.lag > interval {
			st.LateWrites++
		}
		if at, ok := a.at(w.id); ok {
			latency = append(latency, ms(at.Sub(w.committed)))
		}
	}
	st.Latency, st.Commit = percentilesOf(latency), percentilesOf(commit)
	r.res.Steady = st
	r.res.Events, r.res.Seconds = len(writes), elapsed.Seconds()
	r.res.EventsPerSecond = float64(len(writes)) / elapsed.Seconds()
	r.res.Received, r.res.Duplicates = a.counts()
	r.res.Missing = a.missing(ids)
}

// write is one committed event of steady mode.
type write struct {
	id        uuid.UUID
	committed time.Time     // when COMMIT returned
	took      time.Duration // BEGIN to COMMIT's return
	lag       time.Duration // start behind schedule
}

// writeSteady runs cfg.Writers writers for cfg.Duration from now: see
// writeSteadyFrom.
func writeSteady(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, topic string, cfg Config) ([]write, time.Duration, error) {
	return writeSteadyFrom(ctx, pool, table, topic, cfg, time.Now())
}

// writeSteadyFrom runs cfg.Writers writers from start for cfg.Duration.
// Writer w writes at start + (w + k*Writers)/Rate for k = 0, 1, ...:
// together they write Rate events per second, evenly spaced. A writer
// behind its schedule writes at once until it has caught up, and the lag
// is recorded. It returns the committed writes and the time from start to
// the last commit.
func writeSteadyFrom(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, topic string, cfg Config, start time.Time) ([]write, time.Duration, error) {
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		return nil, 0, err
	}
	payload := bytes.Repeat([]byte("x"), cfg.PayloadBytes)
	step := time.Duration(float64(time.Second) / float64(cfg.Rate))
	end := start.Add(cfg.Duration)
	results := make([][]write, cfg.Writers)
	errs := make([]error, cfg.Writers)
	var wg sync.WaitGroup
	for i := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sched := schedule{next: start.Add(time.Duration(i) * step), every: step * time.Duration(cfg.Writers), end: end}
			results[i], errs[i] = writeOnSchedule(ctx, pool, w, sched, topic, fmt.Sprintf("w%d-", i), payload)
		}()
	}
	wg.Wait()
	var all []write
	last := start
	for i := range results {
		all = append(all, results[i]...)
		for _, x := range results[i] {
			last = maxTime(last, x.committed)
		}
	}
	return all, last.Sub(start), errors.Join(errs...)
}

// schedule is one writer's timetable.
type schedule struct {
	next, end time.Time
	every     time.Duration
}

// writeOnSchedule writes one event per slot of s, each in its own
// transaction, with keys keyPrefix0, keyPrefix1, ...
func writeOnSchedule(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, s schedule, topic, keyPrefix string, payload []byte) ([]write, error) {
	var out []write
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for ; s.next.Before(s.end); s.next = s.next.Add(s.every) {
		if d := time.Until(s.next); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-timer.C:
			}
		}
		began := time.Now()
		key := fmt.Appendf([]byte(keyPrefix), "%d", len(out))
		id, err := writeOne(ctx, pool, w, outbox.Message{Topic: topic, Key: key, Payload: payload})
		if err != nil {
			return out, err
		}
		done := time.Now()
		out = append(out, write{id: id, committed: done, took: done.Sub(began), lag: began.Sub(s.next)})
	}
	return out, nil
}

// writeOne commits one event in its own transaction: BEGIN, Write, COMMIT.
func writeOne(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, msg outbox.Message) (uuid.UUID, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return uuid.Nil, fmt.Errorf("writer: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
	res, err := w.Write(ctx, tx, msg)
	if err != nil {
		return uuid.Nil, fmt.Errorf("writer: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return uuid.Nil, fmt.Errorf("writer: commit: %w", err)
	}
	return res.ID, nil
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

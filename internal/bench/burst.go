package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// burst is Config.Burst in progress: one transaction that writes the
// burst's events at Config.BurstAt into a steady run.
type burst struct {
	topic string
	done  chan struct{} // closed once written (or failed)
	// Set before done is closed.
	began, committed time.Time // this process's clock
	dbCommitted      time.Time // the database's clock, just after COMMIT
	err              error
}

// burstTopic is the burst's topic: the run's, with a suffix, so that the
// steady consumer does not read it.
func burstTopic(topic string) string { return topic + ".burst" }

// startBurst prepares the burst's destination and writes the burst at
// start + BurstAt, in the background. It returns nil without a burst.
func (r *runner) startBurst(ctx context.Context, start time.Time) (*burst, error) {
	if r.cfg.Burst == 0 {
		return nil, nil
	}
	b := &burst{topic: burstTopic(r.topic), done: make(chan struct{})}
	if err := r.sink.prepare(ctx, b.topic); err != nil {
		return nil, err
	}
	msgs := make([]outbox.Message, r.cfg.Burst)
	payload := bytes.Repeat([]byte("b"), r.cfg.PayloadBytes)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: b.topic, Key: fmt.Appendf(nil, "burst-%d", i), Payload: payload}
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: r.table})
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(b.done)
		t := time.NewTimer(time.Until(start.Add(r.cfg.BurstAt)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			b.err = ctx.Err()
			return
		case <-t.C:
		}
		b.began = time.Now()
		b.err = pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
			_, err := w.WriteBatch(ctx, tx, msgs)
			return err
		})
		b.committed = time.Now()
		if b.err == nil {
			b.err = r.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&b.dbCommitted)
		}
		if b.err != nil {
			b.err = fmt.Errorf("burst: %w", b.err)
		}
	}()
	return b, nil
}

// awaitBurstSent waits until the burst was written and every one of its
// events is sent, or Config.Grace after the steady writers ended.
func (r *runner) awaitBurstSent(ctx context.Context, b *burst) error {
	if b == nil {
		return nil
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if b.err != nil {
		return b.err
	}
	q := sqlFor("SELECT count(*) FROM {{table}} WHERE topic = $1 AND status <> 'sent'", r.table)
	deadline := time.Now().Add(r.cfg.Grace)
	for {
		var left int
		if err := r.pool.QueryRow(ctx, q, b.topic).Scan(&left); err != nil {
			return fmt.Errorf("burst: %w", err)
		}
		if left == 0 || time.Now().After(deadline) {
			return nil
		}
		if err := r.procs.exited(); err != nil {
			return err
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// summarizeBurst fills SteadyStats.Burst from the burst's rows and the
// steady writes, and removes the burst's destination.
func (r *runner) summarizeBurst(ctx context.Context, b *burst, start time.Time, writes []write, a *arrivals) error {
	if b == nil {
		return nil
	}
	defer func() {
		if err := r.sink.cleanup(context.WithoutCancel(ctx), b.topic); err != nil {
			fmt.Fprintf(r.cfg.Progress, "warning: %v\n", err)
		}
	}()
	var lastSent *time.Time
	var unsent int
	q := sqlFor("SELECT max(sent_at), count(*) FILTER (WHERE status <> 'sent') FROM {{table}} WHERE topic = $1", r.table)
	if err := r.pool.QueryRow(ctx, q, b.topic).Scan(&lastSent, &unsent); err != nil {
		return fmt.Errorf("burst: %w", err)
	}
	if unsent > 0 || lastSent == nil {
		return fmt.Errorf("burst: %d of %d events not sent within --grace (%v) after the writers stopped", unsent, r.cfg.Burst, r.cfg.Grace)
	}
	drain := lastSent.Sub(b.dbCommitted)
	drained := b.committed.Add(drain) // on this process's clock
	var before, during, after []float64
	for _, w := range writes {
		at, ok := a.at(w.id)
		if !ok {
			continue
		}
		l := ms(at.Sub(w.committed))
		switch {
		case w.committed.Before(b.committed):
			before = append(before, l)
		case !w.committed.After(drained):
			during = append(during, l)
		default:
			after = append(after, l)
		}
	}
	r.res.Steady.Burst = &BurstStats{
		Events: r.cfg.Burst, AtS: b.committed.Sub(start).Seconds(), WriteS: b.committed.Sub(b.began).Seconds(),
		DrainS: drain.Seconds(),
		Before: percentilesOf(before), During: percentilesOf(during), After: percentilesOf(after),
	}
	return nil
}

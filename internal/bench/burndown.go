package bench

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/outbox"
)

const (
	// prewriteBatch is the events of one WriteBatch (one COPY) when
	// burn-down fills the table.
	prewriteBatch = 1000
	// drainPoll is how often burn-down looks at what the relays report
	// sent, and drainAsk how often it asks the database whether rows are
	// left before they report them all (drainedEnough).
	drainPoll = 50 * time.Millisecond
	drainAsk  = time.Second
)

// burnDown pre-writes the events, starts the relays and times them from
// their start (database clock, just before the processes start) to the
// last sent_at; then it reads the topic back for duplicates and losses.
func (r *runner) burnDown(ctx context.Context) error {
	fmt.Fprintf(r.cfg.Progress, "burn-down: %d relays: writing %d events\n", r.relays, r.cfg.Events)
	ids, err := prewrite(ctx, r.pool, r.table, r.topic, r.cfg.Events, r.cfg.PayloadBytes)
	if err != nil {
		return err
	}
	if err := vacuumAnalyze(ctx, r.pool, r.table); err != nil {
		return err
	}
	if err := r.recordBefore(ctx); err != nil {
		return err
	}
	release, err := r.holdSnapshot(ctx)
	if err != nil {
		return err
	}
	defer release()
	start, err := dbClock(ctx, r.pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.cfg.Progress, "burn-down: %d relays: draining\n", r.relays)
	if err := r.startRelays(); err != nil {
		return err
	}
	defer r.abort()
	r.startSampler(ctx)
	if err := r.awaitDrained(ctx); err != nil {
		return err
	}
	if err := r.stopRelays(ctx); err != nil {
		return err
	}
	end, err := lastSent(ctx, r.pool, r.table)
	if err != nil {
		return err
	}
	r.res.Events, r.res.Seconds = len(ids), end.Sub(start).Seconds()
	r.res.EventsPerSecond = float64(len(ids)) / r.res.Seconds
	if err := r.checkDelivery(ctx, ids); err != nil {
		return err
	}
	return r.recordAfter(ctx)
}

// awaitDrained polls until no row is pending or processing. It asks the
// database when the relays have reported every event sent, and otherwise
// once every drainAsk (rows retried or failed, or relays that report
// nothing): the question reads the table's indexes, through the dead
// entries the drain leaves, and asked every drainPoll it took database
// time from the relays being measured. The run's end is the last sent_at,
// whenever the question comes.
func (r *runner) awaitDrained(ctx context.Context) error {
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	var asked time.Time
	for {
		if r.drainedEnough() || time.Since(asked) >= drainAsk {
			asked = time.Now()
			left, err := r.unfinished(ctx)
			if err != nil || !left {
				return err
			}
		}
		if err := r.procs.exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rows left when the run timed out: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// drainedEnough reports whether the relays have reported as many rows
// sent as the run wrote.
func (r *runner) drainedEnough() bool {
	sent := 0
	for _, ev := range r.procs.events() {
		sent += ev.sentCount()
	}
	return sent >= r.cfg.Events
}

// unfinished reports whether any row is still pending or processing.
func (r *runner) unfinished(ctx context.Context) (bool, error) {
	if r.my != nil {
		return mysqlUnfinished(ctx, r.my, r.table)
	}
	return unfinished(ctx, r.pool, r.table)
}

// checkDelivery counts the sent rows and reads the whole topic (the
// sink's destination) back:
// distinct events, duplicates and events that never arrived.
func (r *runner) checkDelivery(ctx context.Context, ids []uuid.UUID) error {
	counts, err := statusCounts(ctx, r.pool, r.table)
	if err != nil {
		return err
	}
	r.res.Sent = counts["sent"]
	return r.readBack(ctx, ids)
}

// readBack reads the whole topic (the sink's destination) back: distinct
// events, duplicates and events that never arrived.
func (r *runner) readBack(ctx context.Context, ids []uuid.UUID) error {
	fmt.Fprintf(r.cfg.Progress, "burn-down: %d relays: reading the topic back\n", r.relays)
	a := newArrivals(len(ids))
	if err := r.sink.read(ctx, r.topic, false, a, nil); err != nil {
		return err
	}
	r.res.Received, r.res.Duplicates = a.counts()
	r.res.Missing = a.missing(ids)
	return nil
}

// prewrite writes n events with WriteBatch (COPY), prewriteBatch per
// statement, and returns their ids.
func prewrite(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, topic string, n, payloadBytes int) ([]uuid.UUID, error) {
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		return nil, err
	}
	payload := bytes.Repeat([]byte("x"), payloadBytes)
	ids := make([]uuid.UUID, 0, n)
	msgs := make([]outbox.Message, 0, prewriteBatch)
	for done := 0; done < n; done += len(msgs) {
		msgs = msgs[:0]
		for i := done; i < min(n, done+prewriteBatch); i++ {
			msgs = append(msgs, outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i), Payload: payload})
		}
		results, err := w.WriteBatch(ctx, pool, msgs)
		if err != nil {
			return nil, fmt.Errorf("pre-write: %w", err)
		}
		for _, res := range results {
			ids = append(ids, res.ID)
		}
	}
	return ids, nil
}

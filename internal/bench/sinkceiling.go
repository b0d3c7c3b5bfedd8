package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// runSinkCeiling measures the sink ceiling: cfg.SinkCeilingEvents events
// like burn-down's (payload of cfg.PayloadBytes, keys key-0, key-1, ...,
// fresh ids, a created_at) published by the sink's own publisher (the one
// the relays run, from the same flags) to a fresh destination, in batches
// of cfg.BatchSize, as many batches at a time as a relay has workers by
// default, each batch awaited whole as the relay awaits Publish. The
// messages are built before the clock starts; the destination is removed
// after.
func runSinkCeiling(ctx context.Context, cfg Config, s *sink) (res *SinkCeilingResult, err error) {
	rc := relay.DefaultConfig()
	rc.BatchSize = cfg.BatchSize
	if err := s.settings.Check(rc); err != nil {
		return nil, fmt.Errorf("sink ceiling: %w", err)
	}
	pub, err := s.settings.Open(rc, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		return nil, fmt.Errorf("sink ceiling: %w", err)
	}
	defer func() { err = errors.Join(err, pub.Close()) }()
	topic := fmt.Sprintf("bench.%s.sink-ceiling.%d", cfg.Schema, time.Now().UnixMilli())
	if err := s.prepare(ctx, topic); err != nil {
		return nil, err
	}
	defer func() {
		if err := s.cleanup(context.WithoutCancel(ctx), topic); err != nil {
			fmt.Fprintf(cfg.Progress, "warning: %v\n", err)
		}
	}()
	workers := rc.Workers
	fmt.Fprintf(cfg.Progress, "sink ceiling: %s: publishing %d events in batches of %d, %d at a time\n", cfg.Sink, cfg.SinkCeilingEvents, cfg.BatchSize, workers)
	payload := bytes.Repeat([]byte("x"), cfg.PayloadBytes)
	created := time.Now()
	var batches [][]outbox.Message
	for done := 0; done < cfg.SinkCeilingEvents; done += cfg.BatchSize {
		batch := make([]outbox.Message, 0, cfg.BatchSize)
		for i := done; i < min(cfg.SinkCeilingEvents, done+cfg.BatchSize); i++ {
			batch = append(batch, outbox.Message{ID: uuid.New(), Topic: topic, Key: fmt.Appendf(nil, "key-%d", i), Payload: payload, CreatedAt: created})
		}
		batches = append(batches, batch)
	}
	next := make(chan []outbox.Message)
	took := make([][]float64, workers)
	errs := make([]error, workers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start, cpu := time.Now(), hostReading()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for batch := range next {
				began := time.Now()
				if err := pub.Publish(ctx, batch); err != nil {
					errs[w] = err
					cancel()
					return
				}
				took[w] = append(took[w], ms(time.Since(began)))
			}
		})
	}
feed:
	for _, b := range batches {
		select {
		case next <- b:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	elapsed, busy := time.Since(start), hostBusyBetween(cpu, hostReading())
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("sink ceiling: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sink ceiling: %w", err)
	}
	var all []float64
	for _, t := range took {
		all = append(all, t...)
	}
	res = &SinkCeilingResult{
		Sink: cfg.Sink, Batch: cfg.BatchSize, Workers: workers,
		Events: cfg.SinkCeilingEvents, Seconds: elapsed.Seconds(),
		EventsPerSecond: float64(cfg.SinkCeilingEvents) / elapsed.Seconds(),
		Publish:         percentilesOf(all),
		HostCPUBusy:     busy,
	}
	fmt.Fprintf(cfg.Progress, "sink ceiling: %s: %.0f events/s (batch p50 %.2f ms)\n", cfg.Sink, res.EventsPerSecond, res.Publish.P50)
	return res, nil
}

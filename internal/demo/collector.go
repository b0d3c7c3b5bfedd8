package demo

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
)

// received is one copy of an event as it arrived.
type received struct{ key, payload string }

// collector collects what a Sink read back, indexed by event id, and the
// order in which each key's events arrived.
type collector struct {
	mu     sync.Mutex
	got    map[string][]received
	order  map[string][]string // key -> event ids in arrival order
	notify chan struct{}
}

func newCollector() *collector {
	return &collector{got: map[string][]received{}, order: map[string][]string{}, notify: make(chan struct{}, 1)}
}

// record is the Sink's got function.
func (c *collector) record(m sinks.Record) {
	c.mu.Lock()
	c.got[m.EventID] = append(c.got[m.EventID], received{key: m.Key, payload: m.Payload})
	// Every Sink reads one key's messages in the order the broker keeps
	// them (a Kafka key lives on one partition, read by one goroutine).
	c.order[m.Key] = append(c.order[m.Key], m.EventID)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// read reads topic back from r into c until the function it returns is
// called, which then removes topic's destination, logging what fails.
func (c *collector) read(ctx context.Context, r sinks.Reader, topic string, log *slog.Logger) func() {
	readCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Read(readCtx, topic, true, c.record, nil) }()
	return func() {
		stop()
		if err := errors.Join(<-done, r.Remove(context.WithoutCancel(ctx), topic)); err != nil {
			log.Warn("demo sink not cleaned up", "error", err)
		}
	}
}

// changed fires after new messages arrived.
func (c *collector) changed() <-chan struct{} { return c.notify }

// countKnown counts committed events that arrived at least once.
func (c *collector) countKnown(events map[string]written) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id, w := range events {
		if w.committed && len(c.got[id]) > 0 {
			n++
		}
	}
	return n
}

// drain waits until no message has arrived for quiet.
func (c *collector) drain(quiet time.Duration) {
	for {
		select {
		case <-c.notify:
		case <-time.After(quiet):
			return
		}
	}
}

// snapshot copies what arrived so far.
func (c *collector) snapshot() map[string][]received {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]received, len(c.got))
	for id, r := range c.got {
		out[id] = append([]received(nil), r...)
	}
	return out
}

// arrivals copies, per key, the event ids in the order they arrived.
func (c *collector) arrivals() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]string, len(c.order))
	for k, ids := range c.order {
		out[k] = append([]string(nil), ids...)
	}
	return out
}

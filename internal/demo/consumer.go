package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// received is one message as the consumer saw it.
type received struct{ key, payload string }

// consumer reads every partition of a topic from the start and indexes the
// messages by their event-id header.
type consumer struct {
	mu     sync.Mutex
	got    map[string][]received
	order  map[string][]string // key -> event ids in arrival order
	notify chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newConsumer(ctx context.Context, brokers []string, topic string) (*consumer, error) {
	conn, err := kafkago.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return nil, fmt.Errorf("consumer: dial %s: %w", brokers[0], err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return nil, fmt.Errorf("consumer: partitions of %s: %w", topic, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &consumer{got: map[string][]received{}, order: map[string][]string{}, notify: make(chan struct{}, 1), cancel: cancel}
	for _, p := range parts {
		r := kafkago.NewReader(kafkago.ReaderConfig{
			Brokers: brokers, Topic: topic, Partition: p.ID,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond,
			StartOffset: kafkago.FirstOffset,
		})
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return // ctx cancelled at close
				}
				c.record(m)
			}
		}()
	}
	return c, nil
}

func (c *consumer) record(m kafkago.Message) {
	id := ""
	for _, h := range m.Headers {
		if h.Key == outbox.HeaderEventID {
			id = string(h.Value)
		}
	}
	c.mu.Lock()
	c.got[id] = append(c.got[id], received{key: string(m.Key), payload: string(m.Value)})
	// A key lives on one partition, read by one goroutine: arrival order
	// per key is the partition's order.
	c.order[string(m.Key)] = append(c.order[string(m.Key)], id)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// changed fires after new messages arrived.
func (c *consumer) changed() <-chan struct{} { return c.notify }

// countKnown counts committed events that arrived at least once.
func (c *consumer) countKnown(events map[string]written) int {
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
func (c *consumer) drain(quiet time.Duration) {
	for {
		select {
		case <-c.notify:
		case <-time.After(quiet):
			return
		}
	}
}

// snapshot copies what arrived so far.
func (c *consumer) snapshot() map[string][]received {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]received, len(c.got))
	for id, r := range c.got {
		out[id] = append([]received(nil), r...)
	}
	return out
}

func (c *consumer) close() {
	c.cancel()
	c.wg.Wait()
}

// ensureTopic creates topic with 3 partitions on external brokers unless it
// exists.
func ensureTopic(ctx context.Context, brokers []string, topic string) error {
	conn, err := kafkago.DialContext(ctx, "tcp", brokers[0])
	if err != nil {
		return fmt.Errorf("dial %s: %w", brokers[0], err)
	}
	defer conn.Close()
	ctrl, err := conn.Controller()
	if err != nil {
		return fmt.Errorf("find controller: %w", err)
	}
	cc, err := kafkago.DialContext(ctx, "tcp", net.JoinHostPort(ctrl.Host, strconv.Itoa(ctrl.Port)))
	if err != nil {
		return fmt.Errorf("dial controller: %w", err)
	}
	defer cc.Close()
	err = cc.CreateTopics(kafkago.TopicConfig{Topic: topic, NumPartitions: 3, ReplicationFactor: 1})
	if err != nil && !errors.Is(err, kafkago.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// arrivals copies, per key, the event ids in the order they arrived.
func (c *consumer) arrivals() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]string, len(c.order))
	for k, ids := range c.order {
		out[k] = append([]string(nil), ids...)
	}
	return out
}

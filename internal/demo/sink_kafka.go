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

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Kafka is the demo's Kafka: an embedded kfake broker, or brokers given,
// read back with kafka-go, one reader per partition.
type Kafka struct {
	brokers  []string
	embedded *kfakebroker.Broker
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// NewKafka returns the demo's Kafka on brokers; with none it starts an
// embedded kfake broker on 127.0.0.1 with topic already created, 3
// partitions. Brokers says where the relays publish.
func NewKafka(brokers []string, topic string) (*Kafka, error) {
	if len(brokers) > 0 {
		return &Kafka{brokers: brokers}, nil
	}
	b, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic}, Partitions: 3})
	if err != nil {
		return nil, fmt.Errorf("start embedded broker: %w", err)
	}
	return &Kafka{brokers: b.Addrs(), embedded: b}, nil
}

// Brokers returns the bootstrap brokers: the embedded broker's address, or
// those given to NewKafka.
func (k *Kafka) Brokers() []string { return k.brokers }

// Open creates topic with 3 partitions on brokers given (unless it exists)
// and reads every partition from its first offset.
func (k *Kafka) Open(ctx context.Context, topic string, got func(Received)) (string, error) {
	desc := fmt.Sprintf("kafka:    embedded kfake broker on %v, topic %s (3 partitions)", k.brokers, topic)
	if k.embedded == nil {
		if err := ensureTopic(ctx, k.brokers, topic); err != nil {
			return "", err
		}
		desc = fmt.Sprintf("kafka:    brokers %v, topic %s", k.brokers, topic)
	}
	conn, err := kafkago.DialContext(ctx, "tcp", k.brokers[0])
	if err != nil {
		return "", fmt.Errorf("consumer: dial %s: %w", k.brokers[0], err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		return "", fmt.Errorf("consumer: partitions of %s: %w", topic, err)
	}
	ctx, k.cancel = context.WithCancel(ctx)
	var mu sync.Mutex // got is called from one goroutine at a time
	for _, p := range parts {
		r := kafkago.NewReader(kafkago.ReaderConfig{
			Brokers: k.brokers, Topic: topic, Partition: p.ID,
			MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 100 * time.Millisecond,
			StartOffset: kafkago.FirstOffset,
		})
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return // ctx cancelled at Close
				}
				rec := Received{Key: string(m.Key), Payload: string(m.Value)}
				for _, h := range m.Headers {
					if h.Key == outbox.HeaderEventID {
						rec.EventID = string(h.Value)
					}
				}
				mu.Lock()
				got(rec)
				mu.Unlock()
			}
		}()
	}
	return desc, nil
}

// Close stops the readers and the embedded broker.
func (k *Kafka) Close() error {
	if k.cancel != nil {
		k.cancel()
	}
	k.wg.Wait()
	if k.embedded != nil {
		k.embedded.Close()
	}
	return nil
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

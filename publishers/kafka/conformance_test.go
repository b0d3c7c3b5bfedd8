package kafka_test

import (
	"strconv"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
)

// TestConformance runs the sink conformance suite against a kfake broker
// on loopback TCP, every connection through a fault proxy.
func TestConformance(t *testing.T) {
	t.Parallel()
	var proxy *faultproxy.Proxy
	b := startBroker(t, kfakebroker.Options{
		Listen: faultproxy.ListenTo(&proxy),
	})
	publisherstest.Run(t, publisherstest.Harness{
		Name: "kafka",
		Features: publisherstest.Features{
			DurableAcks:      true,
			KeyOrder:         true,
			KeyBatches:       true,
			PerMessageErrors: true,
			MaxMessageBytes:  kafka.DefaultMaxMessageBytes,
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			return newPublisher(t, kafka.Config{Brokers: b.Addrs()})
		},
		Topic: func(t *testing.T) string {
			topic := topicName("conformance")
			createTopic(t, b.Addrs(), topic, kfakebroker.DefaultPartitions)
			return topic
		},
		RejectingTopic: func(*testing.T) string { return topicName("never-created") },
		Read: func(t *testing.T, topic string) []publisherstest.Record {
			return conformanceRecords(t, topic, kafkatest.ReadTopic(t, b.Addrs(), topic, nil))
		},
		Cut:   func() { proxy.Cut() },
		Stall: func() { proxy.Stall() },
		Heal:  func() { proxy.Heal() },
	})
}

// conformanceRecords converts records read back from topic.
func conformanceRecords(t *testing.T, topic string, recs []kafkatest.Record) []publisherstest.Record {
	t.Helper()
	out := make([]publisherstest.Record, len(recs))
	for i, r := range recs {
		headers := make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			if _, dup := headers[h.Key]; dup {
				t.Errorf("record %d/%d carries header %q twice", r.Partition, r.Offset, h.Key)
			}
			headers[h.Key] = string(h.Value)
		}
		out[i] = publisherstest.Record{
			Topic: topic, Stream: strconv.Itoa(r.Partition),
			Key: r.Key, Value: r.Value, Headers: headers, EventID: r.EventID(),
		}
	}
	return out
}

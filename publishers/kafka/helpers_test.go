package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
)

// startBroker starts a kfake broker closed at the end of the test.
func startBroker(t *testing.T, opts kfakebroker.Options) *kfakebroker.Broker {
	t.Helper()
	b, err := kfakebroker.Start(opts)
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// newPublisher returns a publisher closed at the end of the test.
func newPublisher(t *testing.T, cfg kafka.Config) *kafka.Publisher {
	t.Helper()
	p, err := kafka.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// testCtx returns a context that ends with the test or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

var keySeq atomic.Int64

// newMsg returns a message with a fresh id; key "" means a nil key.
func newMsg(topic, key, payload string) outbox.Message {
	m := outbox.Message{ID: uuid.New(), Topic: topic, Payload: []byte(payload)}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

// record is a record read back from the broker.
type record = kafkatest.Record

// eventIDOf returns the event id header of r.
func eventIDOf(t *testing.T, r record) uuid.UUID {
	t.Helper()
	v, ok := r.Header(outbox.HeaderEventID)
	if !ok {
		t.Fatalf("record at %d/%d has no %s header", r.Partition, r.Offset, outbox.HeaderEventID)
	}
	id, err := uuid.Parse(v)
	if err != nil {
		t.Fatalf("event id header %q: %v", v, err)
	}
	return id
}

// readTopic reads every record of topic; see kafkatest.ReadTopic.
func readTopic(t *testing.T, addrs []string, topic string) []record {
	t.Helper()
	return kafkatest.ReadTopic(t, addrs, topic, nil)
}

// byEventID indexes records by their event id header.
func byEventID(t *testing.T, recs []record) map[uuid.UUID]record {
	t.Helper()
	m := make(map[uuid.UUID]record, len(recs))
	for _, r := range recs {
		id := eventIDOf(t, r)
		if _, dup := m[id]; dup {
			t.Errorf("event %s published twice", id)
		}
		m[id] = r
	}
	return m
}

// perMessage expands a Publish result, requiring a publishers.Errors when
// the outcome differs per message.
func perMessage(t *testing.T, err error, n int) []error {
	t.Helper()
	var each publishers.Errors
	if errors.As(err, &each) && len(each) != n {
		t.Fatalf("publishers.Errors of length %d for %d messages", len(each), n)
	}
	return publishers.PerMessage(err, n)
}

// newClient returns a kafka-go client with its own transport, closed at the
// end of the test (kafka-go's DefaultTransport would keep goroutines).
func newClient(t *testing.T, addrs []string, transport *kafkago.Transport) *kafkago.Client {
	if transport == nil {
		transport = &kafkago.Transport{}
	}
	t.Cleanup(transport.CloseIdleConnections)
	return &kafkago.Client{Addr: kafkago.TCP(addrs...), Transport: transport}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// createTopic creates topic with kafka-go's Client.
func createTopic(t *testing.T, addrs []string, topic string, partitions int) {
	t.Helper()
	client := newClient(t, addrs, nil)
	res, err := client.CreateTopics(testCtx(t, 10*time.Second), &kafkago.CreateTopicsRequest{
		Topics: []kafkago.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}},
	})
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if err := res.Errors[topic]; err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// plainMechanism returns kafka-go's SASL PLAIN mechanism.
func plainMechanism(user, password string) sasl.Mechanism {
	return plain.Mechanism{Username: user, Password: password}
}

// contextWithCancel returns a cancelable context ending with the test.
func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}

var errCanceled = context.Canceled

// mustNotContain fails when s holds secret.
func mustNotContain(t *testing.T, what, s, secret string) {
	t.Helper()
	if strings.Contains(s, secret) {
		t.Errorf("%s contains the secret: %s", what, s)
	}
}

// topicName returns a topic name unique within the test binary.
func topicName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, keySeq.Add(1))
}

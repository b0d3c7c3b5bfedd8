package integration

import (
	"net"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
)

// startBroker starts a kfake cluster on loopback TCP, closed when the test
// ends (after the relays and publishers started later).
func startBroker(t *testing.T, opts kfakebroker.Options) *kfakebroker.Broker {
	t.Helper()
	br, err := kfakebroker.Start(opts)
	if err != nil {
		t.Fatalf("start kfake broker: %v", err)
	}
	t.Cleanup(br.Close)
	return br
}

// newKafkaPublisher returns the real Kafka sink, closed when the test ends.
func newKafkaPublisher(t *testing.T, cfg kafka.Config) *kafka.Publisher {
	t.Helper()
	p, err := kafka.New(cfg)
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("kafka publisher Close: %v", err)
		}
	})
	return p
}

// record is one Kafka record read back with kafka-go.
type record = kafkatest.Record

// readTopic reads every record of topic; see kafkatest.ReadTopic.
func readTopic(t *testing.T, addrs []string, topic string) []record {
	t.Helper()
	return kafkatest.ReadTopic(t, addrs, topic, nil)
}

// record per id is a duplicate delivery.
func byEventID(recs []record) map[string][]record {
	m := make(map[string][]record, len(recs))
	for _, r := range recs {
		m[r.EventID()] = append(m[r.EventID()], r)
	}
	return m
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

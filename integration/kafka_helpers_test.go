package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
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
type record struct {
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kafkago.Header
}

// header returns the value of the named header and whether it is present
// exactly once.
func (r record) header(name string) (string, bool) {
	var v string
	n := 0
	for _, h := range r.Headers {
		if h.Key == name {
			v = string(h.Value)
			n++
		}
	}
	return v, n == 1
}

// eventID is the record's outbox-event-id header ("" when missing).
func (r record) eventID() string {
	v, _ := r.header(outbox.HeaderEventID)
	return v
}

// readTopic is the test consumer: it reads every record of topic, every
// partition from offset 0 up to its high watermark, with kafka-go's Client.
// Callers wait for the rows to be sent first: a row is marked sent only
// after the brokers acknowledged it (acks=all), so by then it is readable.
func readTopic(t *testing.T, addrs []string, topic string) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	transport := &kafkago.Transport{}
	defer transport.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(addrs...), Transport: transport}
	md, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		t.Fatalf("metadata of %s: %+v", topic, md.Topics)
	}
	var out []record
	for _, p := range md.Topics[0].Partitions {
		var offset int64
		for {
			res, err := client.Fetch(ctx, &kafkago.FetchRequest{
				Topic: topic, Partition: p.ID, Offset: offset,
				MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 10 * time.Millisecond,
			})
			if err != nil {
				t.Fatalf("fetch %s/%d@%d: %v", topic, p.ID, offset, err)
			}
			if res.Error != nil {
				t.Fatalf("fetch %s/%d@%d: %v", topic, p.ID, offset, res.Error)
			}
			for {
				r, err := res.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("read record of %s/%d: %v", topic, p.ID, err)
				}
				key, err := protocol.ReadAll(r.Key)
				if err != nil {
					t.Fatal(err)
				}
				value, err := protocol.ReadAll(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				if r.Offset >= offset {
					out = append(out, record{Partition: p.ID, Offset: r.Offset, Key: key, Value: value, Headers: r.Headers})
					offset = r.Offset + 1
				}
			}
			if offset >= res.HighWatermark {
				break
			}
		}
	}
	return out
}

// byEventID groups records by their outbox-event-id header: more than one
// record per id is a duplicate delivery.
func byEventID(recs []record) map[string][]record {
	m := make(map[string][]record, len(recs))
	for _, r := range recs {
		m[r.eventID()] = append(m[r.eventID()], r)
	}
	return m
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

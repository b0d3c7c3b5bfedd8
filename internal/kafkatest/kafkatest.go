// Package kafkatest is the tests' Kafka consumer: it reads a whole topic
// back from a broker with kafka-go's Client, so that tests can check what the
// sink and the relay really published.
package kafkatest

import (
	"context"
	"errors"
	"io"
	"sort"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Record is one record read back from the broker.
type Record struct {
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kafkago.Header
	// Time is the record's timestamp: the producer's clock when it built
	// the produce request that appended it (CreateTime).
	Time time.Time
}

// Header returns the value of the named header and whether it is present
// exactly once.
func (r Record) Header(name string) (string, bool) {
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

// EventID returns the record's outbox-event-id header ("" when missing).
func (r Record) EventID() string {
	v, _ := r.Header(outbox.HeaderEventID)
	return v
}

// ReadTopic reads every record of topic, partition by partition in offset
// order, from offset 0 up to each partition's high watermark. transport nil
// means a plaintext one; it is closed when the test ends. Callers wait for
// the rows to be sent first: a row is marked sent only after the brokers
// acknowledged it (acks=all), so by then it is readable.
func ReadTopic(t testing.TB, addrs []string, topic string, transport *kafkago.Transport) []Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if transport == nil {
		transport = &kafkago.Transport{}
	}
	defer transport.CloseIdleConnections() // kafka-go's default transport would keep goroutines
	client := &kafkago.Client{Addr: kafkago.TCP(addrs...), Transport: transport}
	md, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil {
		t.Fatalf("metadata of %s: %+v", topic, md.Topics)
	}
	var out []Record
	for _, p := range md.Topics[0].Partitions {
		out = append(out, readPartition(ctx, t, client, topic, p.ID)...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

func readPartition(ctx context.Context, t testing.TB, client *kafkago.Client, topic string, partition int) []Record {
	t.Helper()
	var out []Record
	var offset int64
	for {
		res, err := client.Fetch(ctx, &kafkago.FetchRequest{
			Topic: topic, Partition: partition, Offset: offset,
			MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 10 * time.Millisecond,
		})
		if err != nil {
			t.Fatalf("fetch %s/%d@%d: %v", topic, partition, offset, err)
		}
		if res.Error != nil {
			t.Fatalf("fetch %s/%d@%d: %v", topic, partition, offset, res.Error)
		}
		for {
			r, err := res.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("read record of %s/%d: %v", topic, partition, err)
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
				out = append(out, Record{Partition: partition, Offset: r.Offset, Key: key, Value: value, Headers: r.Headers, Time: r.Time})
				offset = r.Offset + 1
			}
		}
		if offset >= res.HighWatermark {
			return out
		}
	}
}

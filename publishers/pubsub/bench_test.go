package pubsubsink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/google/uuid"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// The benchmarks publish batches of 100 messages of 200 bytes (10 keys)
// to the in-process fake: the sink's Publish, and the bare client doing
// the same acknowledged sends (ordering on, every result awaited), so the
// ratio is read within one run.
//
//	go test -run '^$' -bench . -count 3 ./publishers/pubsub
const benchBatch = 100

var benchPayload = []byte(strings.Repeat("x", 200))

func BenchmarkPublish(b *testing.B) {
	f := startFake(b)
	topic := f.newTopic(b, "bench")
	p := newPublisher(b, f.srv.Addr)
	msgs := make([]outbox.Message, benchBatch)
	b.ResetTimer()
	for range b.N {
		for i := range msgs {
			msgs[i] = outbox.Message{ID: uuid.New(), Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%10), Payload: benchPayload}
		}
		if err := p.Publish(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchBatch*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkBareClient(b *testing.B) {
	f := startFake(b)
	topic := f.newTopic(b, "bench")
	client, err := pubsub.NewClient(context.Background(), project, option.WithEndpoint(f.srv.Addr),
		option.WithoutAuthentication(), option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	t := client.Publisher(topic)
	t.EnableMessageOrdering = true
	t.PublishSettings.DelayThreshold = time.Millisecond
	defer t.Stop()
	results := make([]*pubsub.PublishResult, benchBatch)
	b.ResetTimer()
	for range b.N {
		for i := range results {
			attrs := map[string]string{outbox.HeaderEventID: uuid.NewString(), "outbox-key": fmt.Sprintf("key-%d", i%10)}
			results[i] = t.Publish(context.Background(), &pubsub.Message{Data: benchPayload, Attributes: attrs, OrderingKey: attrs["outbox-key"]})
		}
		for _, r := range results {
			if _, err := r.Get(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(benchBatch*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

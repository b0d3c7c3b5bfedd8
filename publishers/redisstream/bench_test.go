package redisstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// benchBatch is the number of messages per Publish in the benchmarks, each
// with a 200-byte payload.
const benchBatch = 10000

func benchMessages(topic string) []outbox.Message {
	payload := []byte(strings.Repeat("p", 200))
	msgs := make([]outbox.Message, benchBatch)
	for i := range msgs {
		msgs[i] = outbox.Message{
			ID: uuid.New(), Topic: topic, Key: []byte("customer-" + string(rune('a'+i%26))),
			Payload: payload, Headers: map[string]string{"content-type": "application/json"},
			Attempt: 1, CreatedAt: time.Now(),
		}
	}
	return msgs
}

// BenchmarkPublish measures the sink: one Publish of 10,000 messages of
// 200 bytes per iteration, on the Redis the tests share. Compare with
// BenchmarkBarePipeline, its ceiling.
func BenchmarkPublish(b *testing.B) {
	addr := sharedRedis(b)
	c := newClient(b, addr)
	topic := freshStream(b, c, "")
	msgs := benchMessages(topic)
	p := newPublisher(b, redisstream.Config{URL: "redis://" + addr})
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if err := p.Publish(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.Del(ctx, topic) // keep the shared server's memory flat
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkBarePipeline is the sink's ceiling: go-redis alone pipelining
// the same XADDs, with the same fields, prepared beforehand, on one
// connection, without checking per-message results.
func BenchmarkBarePipeline(b *testing.B) {
	addr := sharedRedis(b)
	c := newClient(b, addr)
	topic := freshStream(b, c, "")
	msgs := benchMessages(topic)
	values := make([][]any, len(msgs))
	for i, m := range msgs {
		values[i] = []any{
			redisstream.FieldEventID, m.ID.String(), redisstream.FieldKey, m.Key, redisstream.FieldPayload, m.Payload,
			redisstream.FieldHeaders, `{"content-type":"application/json"}`, redisstream.FieldCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano),
		}
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := range values {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: topic, Values: values[i]})
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.Del(ctx, topic)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

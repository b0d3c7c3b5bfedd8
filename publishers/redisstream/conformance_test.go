package redisstream_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// conformanceMaxBytes is the MaxMessageBytes the conformance publishers
// get, so that the suite's too-large message stays small.
const conformanceMaxBytes = 1 << 20

// TestConformance runs the sink conformance suite against the Redis on
// this machine, every connection of the sink through a fault proxy; the
// suite reads what arrived straight from Redis.
func TestConformance(t *testing.T) {
	t.Parallel()
	addr := sharedRedis(t)
	proxy, err := faultproxy.Start(addr)
	if err != nil {
		t.Fatalf("start fault proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	reader := newClient(t, addr)
	publisherstest.Run(t, publisherstest.Harness{
		Name: "redis",
		Features: publisherstest.Features{
			DurableAcks:      true, // the XADD reply: readable by anyone at once (see the package documentation on durability)
			KeyOrder:         true, // one pipeline on one connection, one stream per topic
			PerMessageErrors: true, // WRONGTYPE refuses one XADD of the pipeline
			MaxMessageBytes:  conformanceMaxBytes,
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			return newPublisher(t, redisstream.Config{URL: "redis://" + proxy.Addr(), MaxMessageBytes: conformanceMaxBytes})
		},
		Topic: func(t *testing.T) string { return freshStream(t, reader, "") },
		RejectingTopic: func(t *testing.T) string {
			// A key holding a string: XADD answers WRONGTYPE.
			topic := freshStream(t, reader, "")
			if err := reader.Set(testCtx(t, publisherstestTimeout), topic, "not a stream", 0).Err(); err != nil {
				t.Fatalf("SET %s: %v", topic, err)
			}
			return topic
		},
		Read: func(t *testing.T, topic string) []publisherstest.Record {
			return records(t, topic, topic, readStream(t, reader, topic))
		},
		Cut:   proxy.Cut,
		Stall: proxy.Stall,
		Heal:  proxy.Heal,
	})
}

package kinesissink_test

import (
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/publishers"
	kinesissink "github.com/outboxrelay/outboxrelay/publishers/kinesis"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
)

// TestConformance runs the sink conformance suite against kinesalite, the
// publishers' connections through a fault proxy; each subtest gets a
// stream of 2 shards.
func TestConformance(t *testing.T) {
	t.Parallel()
	endpoint, c := emulator(t)
	proxy, err := faultproxy.Start(hostport(endpoint))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	publisherstest.Run(t, publisherstest.Harness{
		Name: "kinesis",
		Features: publisherstest.Features{
			DurableAcks:      true, // a sequence number once the shard took the record
			KeyOrder:         true,
			KeyBatches:       true,
			PerMessageErrors: true,
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			p, err := kinesissink.New(kinesissink.Config{Endpoint: "http://" + proxy.Addr(), Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Topic:          func(t *testing.T) string { return stream(t, c) },
		RejectingTopic: func(*testing.T) string { return "no-such-stream" },
		Read:           func(t *testing.T, topic string) []publisherstest.Record { return read(t, c, topic) },
		Cut:            proxy.Cut,
		Stall:          proxy.Stall,
		Heal:           proxy.Heal,
	})
}

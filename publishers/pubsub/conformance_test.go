package pubsubsink_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	pubsubsink "github.com/outboxrelay/outboxrelay/publishers/pubsub"
)

// TestConformance runs the sink conformance suite against the in-process
// fake, the publishers' connections through a fault proxy; each subtest
// gets a topic of its own, read back from the fake's store.
func TestConformance(t *testing.T) {
	t.Parallel()
	f := startFake(t)
	proxy, err := faultproxy.Start(f.srv.Addr)
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	publisherstest.Run(t, publisherstest.Harness{
		Name: "pubsub",
		Features: publisherstest.Features{
			DurableAcks:      true,
			KeyOrder:         true,
			KeyBatches:       true,
			PerMessageErrors: true,
			MaxMessageBytes:  64 << 10,
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			return newPublisher(t, proxy.Addr(), func(c *pubsubsink.Config) { c.MaxMessageBytes = 64 << 10 })
		},
		Topic:          func(t *testing.T) string { return f.newTopic(t, "conformance") },
		RejectingTopic: func(*testing.T) string { return unknownTopic() },
		Read:           func(t *testing.T, topic string) []publisherstest.Record { return f.records(t, topic) },
		Cut:            proxy.Cut,
		Stall:          proxy.Stall,
		Heal:           proxy.Heal,
	})
}

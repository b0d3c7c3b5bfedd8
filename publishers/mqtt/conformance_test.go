package mqttsink_test

import (
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/publishers"
	mqttsink "github.com/outboxrelay/outboxrelay/publishers/mqtt"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
)

// TestConformance runs the sink conformance suite against a private
// Mosquitto, the publishers' connections through a fault proxy.
func TestConformance(t *testing.T) {
	t.Parallel()
	addr := broker(t)
	proxy, err := faultproxy.Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	sub := subscribe(t, addr)
	publisherstest.Run(t, publisherstest.Harness{
		Name: "mqtt",
		Features: publisherstest.Features{
			DurableAcks:      true, // PUBACK once the broker took the message (persistence is the broker's)
			KeyOrder:         true,
			KeyBatches:       true,
			PerMessageErrors: true,
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			p, err := mqttsink.New(mqttsink.Config{URL: "mqtt://" + proxy.Addr(), PublishTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Topic:          func(t *testing.T) string { return sub.topic(t) },
		RejectingTopic: func(*testing.T) string { return "test/+/wildcard" },
		Read:           func(t *testing.T, topic string) []publisherstest.Record { return sub.read(t, topic) },
		Cut:            proxy.Cut,
		Stall:          proxy.Stall,
		Heal:           proxy.Heal,
	})
}

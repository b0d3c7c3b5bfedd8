package rabbitmq_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// conformanceMaxMessageBytes is the publishers' MaxMessageBytes in the
// conformance suite: smaller than the broker's max_message_size, so that
// the check of a message over it does not ship 128 MiB.
const conformanceMaxMessageBytes = 1 << 20

// TestConformance runs the sink conformance suite against the RabbitMQ on
// this machine, the publishers' connections through a fault proxy. Each
// subtest's topic is a fresh exchange with a fresh queue bound to it.
func TestConformance(t *testing.T) {
	t.Parallel()
	b := newBroker(t)
	proxy := startProxy(t)
	url := proxied(t, proxy.Addr())
	publisherstest.Run(t, publisherstest.Harness{
		Name: "rabbitmq",
		Features: publisherstest.Features{
			DurableAcks:      true, // publisher confirms of persistent messages on durable queues
			KeyOrder:         true, // one channel per call, to one queue
			PerMessageErrors: true, // unroutable messages are returned (mandatory)
			MaxMessageBytes:  conformanceMaxMessageBytes,
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			return newPublisher(t, rabbitmq.Config{URL: url, MaxMessageBytes: conformanceMaxMessageBytes})
		},
		Topic: b.topic,
		// An exchange without a queue bound: every message is returned.
		RejectingTopic: func(t *testing.T) string { return b.exchange(t, "direct") + "/nobody-listens" },
		Read:           b.records,
		Cut:            proxy.Cut,
		Stall:          proxy.Stall,
		Heal:           proxy.Heal,
	})
}

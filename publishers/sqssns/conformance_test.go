package sqssns_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/sqssns"
)

// conformance runs the suite against an emulator behind a fault proxy;
// topic creates a destination and returns its name and the URL of the
// queue that receives it.
func conformance(t *testing.T, name string, newPub func(sqssns.Config) (*sqssns.Publisher, error),
	topic func(c *clients, t *testing.T) (string, string)) {
	url := startService(t)
	proxy, err := faultproxy.Start(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatalf("start fault proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	c := newClients(t, url)
	var mu sync.Mutex
	queues := map[string]string{}
	publisherstest.Run(t, publisherstest.Harness{
		Name: name,
		Features: publisherstest.Features{
			DurableAcks:      true, // the batch response lists the message as stored
			KeyOrder:         true, // FIFO destinations, one group per key
			PerMessageErrors: true, // a missing destination refuses its messages only
			MaxMessageBytes:  sqssns.DefaultMaxMessageBytes,
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			p, err := newPub(sqssns.Config{Endpoint: "http://" + proxy.Addr()})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Topic: func(t *testing.T) string {
			dest, url := topic(c, t)
			mu.Lock()
			defer mu.Unlock()
			queues[dest] = url
			return dest
		},
		RejectingTopic: func(t *testing.T) string { return "missing-" + t.Name()[len(t.Name())-4:] + ".fifo" },
		Read: func(t *testing.T, dest string) []publisherstest.Record {
			mu.Lock()
			url := queues[dest]
			mu.Unlock()
			return c.read(t, dest, url)
		},
		Cut:   proxy.Cut,
		Stall: proxy.Stall,
		Heal:  proxy.Heal,
	})
}

// TestConformanceSQS runs the sink conformance suite on FIFO queues of
// local-aws-sqs.
func TestConformanceSQS(t *testing.T) {
	conformance(t, "sqs", sqssns.NewSQS, func(c *clients, t *testing.T) (string, string) { return c.queue(t, true) })
}

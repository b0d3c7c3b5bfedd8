package natssink_test

import (
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
)

// TestConformance runs the sink conformance suite against the NATS server
// with JetStream on this machine, the publishers' connections through a
// fault proxy; each subtest gets a stream of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	c := connect(t, serverURL())
	proxy, err := faultproxy.Start(serverAddr(t))
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	var streams sync.Map // subject -> stream name
	publisherstest.Run(t, publisherstest.Harness{
		Name: "nats",
		Features: publisherstest.Features{
			DurableAcks:      true,
			KeyOrder:         true,
			PerMessageErrors: true,
			MaxMessageBytes:  int(c.nc.MaxPayload()),
			Prober:           true,
			Outage:           true,
			Stall:            true,
		},
		New: func(t *testing.T) publishers.Publisher {
			return newPublisher(t, natssink.Config{URLs: []string{"nats://" + proxy.Addr()}})
		},
		Topic: func(t *testing.T) string {
			subject, stream := c.newStream(t, "conformance", nil)
			streams.Store(subject, stream)
			return subject
		},
		RejectingTopic: func(*testing.T) string { return unboundSubject() },
		Read: func(t *testing.T, topic string) []publisherstest.Record {
			stream, ok := streams.Load(topic)
			if !ok {
				t.Fatalf("Read(%q): not a subject Topic returned", topic)
			}
			return records(t, stream.(string), c.read(t, stream.(string)))
		},
		Cut:   proxy.Cut,
		Stall: proxy.Stall,
		Heal:  proxy.Heal,
	})
}

// records converts the messages read back from stream, checking that the
// event id the stream deduplicates by is the event id consumers see.
func records(t *testing.T, stream string, msgs []jetstream.Msg) []publisherstest.Record {
	t.Helper()
	out := make([]publisherstest.Record, len(msgs))
	for i, m := range msgs {
		h := m.Headers()
		key, err := natssink.Key(h)
		if err != nil {
			t.Errorf("message %d of %s: %v", i, stream, err)
		}
		headers := make(map[string]string, len(h))
		for name, values := range h {
			switch name {
			case jetstream.MsgIDHeader, natssink.HeaderKey, natssink.HeaderKeyBase64:
				continue
			}
			if len(values) != 1 {
				t.Errorf("message %d of %s carries header %q %d times", i, stream, name, len(values))
			}
			headers[name] = values[0]
		}
		id := h.Get(outbox.HeaderEventID)
		if msgID := h.Get(jetstream.MsgIDHeader); msgID != id {
			t.Errorf("message %d of %s: %s is %q, event id %q", i, stream, jetstream.MsgIDHeader, msgID, id)
		}
		out[i] = publisherstest.Record{
			Topic: m.Subject(), Stream: stream,
			Key: key, Value: m.Data(), Headers: headers, EventID: id,
		}
	}
	return out
}

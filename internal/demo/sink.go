package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// Sink is one kind of broker as the demo sees it: it creates what
// publishing the demo's topic there needs, and reads back, with the
// broker's own client, everything published to it. The relays publish with
// the real sink (Config.Publisher); a Sink only prepares and reads.
//
// Every Sink reads one key's messages in the order the broker keeps them,
// and every sink keeps the order of one key's messages within a publish
// call, so Run checks per-key order with Config.Ordered whatever the sink.
type Sink interface {
	// Open creates the destination of topic (a Kafka topic, a JetStream
	// stream capturing its subject, a queue bound where the RabbitMQ sink
	// routes it...) and starts reading it from its beginning, handing each
	// message to got, from one goroutine at a time. It returns a line that
	// describes the destination, for the demo's output. It does not block.
	Open(ctx context.Context, topic string, got func(Received)) (string, error)
	// Close stops reading, waits for the reader, and removes what Open
	// and the constructor created (a stream, a queue, an embedded broker,
	// a receiver). It may be called without Open.
	Close() error
}

// Received is one message as a Sink read it back.
type Received struct {
	// EventID is the outbox event id the message carries (the
	// outbox-event-id header or its equivalent); "" when it carries none.
	EventID string
	// Key is the outbox key, its bytes as a string.
	Key string
	// Payload is the message's body.
	Payload string
}

// UniqueTopic returns base with a suffix unique to the run (".r" and 8
// hex digits), a valid Kafka topic, NATS subject, RabbitMQ routing key,
// Redis stream key and URL path segment: a broker that keeps what earlier
// runs published then gives each run a destination of its own.
func UniqueTopic(base string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails
	return base + ".r" + hex.EncodeToString(b[:])
}

package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// ErrNoEventID means a delivered message carries no event id, or one that
// is not a UUID: it was not published by the relay (or its
// outbox-event-id header was lost), so the inbox cannot tell a duplicate.
var ErrNoEventID = errors.New("inbox: message has no valid " + outbox.HeaderEventID)

// Message is a delivered event as the inbox sees it. The adapters (inbox/kafkago,
// inbox/franzgo, inbox/jetstream, inbox/amqp, inbox/redisstream,
// inbox/webhook) read one from what their sink delivers.
type Message struct {
	// ID is the event id the relay sent (header outbox-event-id): the same
	// on every delivery of the event.
	ID uuid.UUID
	// Topic is the destination it was delivered from: the Kafka topic,
	// the NATS subject, the stream, the routing key or the webhook's
	// Outbox-Topic.
	Topic string
	// Key is the event's key; nil when it had none.
	Key []byte
	// CreatedAt is when the event was written to the outbox, as far as
	// the sink carries it; zero when it does not.
	CreatedAt time.Time
	// Headers are the event's own headers, traceparent and tracestate
	// included, without the sink's.
	Headers map[string]string
	// Payload is the event's body.
	Payload []byte
}

// ParseID reads an event id as the relay writes it (a UUID in canonical
// form). The error wraps ErrNoEventID.
func ParseID(s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.UUID{}, ErrNoEventID
	}
	id, err := uuid.Parse(s)
	if err != nil || id == (uuid.UUID{}) {
		return uuid.UUID{}, fmt.Errorf("%w: %q", ErrNoEventID, truncate(s, 64))
	}
	return id, nil
}

// Context returns ctx with the remote span context of m's traceparent
// (W3C Trace Context) when it has one, so that a span started from it
// continues the trace of the request that wrote the event.
func (m Message) Context(ctx context.Context) context.Context {
	if m.Headers[outbox.HeaderTraceparent] == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(m.Headers))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

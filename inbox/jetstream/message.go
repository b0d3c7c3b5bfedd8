package jetstream

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// Message returns the inbox message of a JetStream message that the
// relay's NATS sink published, mapped as the package documentation says.
// The error wraps inbox.ErrNoEventID when the message has no valid event
// id.
func Message(m jetstream.Msg) (inbox.Message, error) {
	return convert(m.Subject(), m.Headers(), m.Data())
}

// CoreMessage is Message for a *nats.Msg, as a core NATS subscription or
// the older nats.JetStreamContext API delivers it.
func CoreMessage(m *nats.Msg) (inbox.Message, error) {
	return convert(m.Subject, m.Header, m.Data)
}

func convert(subject string, h nats.Header, data []byte) (inbox.Message, error) {
	id, err := inbox.ParseID(first(h[outbox.HeaderEventID]))
	if err != nil {
		return inbox.Message{}, fmt.Errorf("nats message on %s: %w", subject, err)
	}
	key, err := natssink.Key(h)
	if err != nil {
		return inbox.Message{}, fmt.Errorf("nats message on %s: %w", subject, err)
	}
	headers := make(map[string]string, len(h))
	for name, values := range h {
		if len(values) > 0 && !sinkHeader(name) {
			headers[name] = values[0]
		}
	}
	return inbox.Message{ID: id, Topic: subject, Key: key, Headers: headers, Payload: data}, nil
}

// sinkHeader reports whether a header is the sink's or the server's, not
// the event's: the sink refuses event headers of these names.
func sinkHeader(name string) bool {
	switch name {
	case outbox.HeaderEventID, natssink.HeaderKey, natssink.HeaderKeyBase64:
		return true
	}
	return len(name) >= 5 && strings.EqualFold(name[:5], "nats-")
}

func first(values []string) string {
	if len(values) == 0 {
		return ""
	}
	return values[0]
}

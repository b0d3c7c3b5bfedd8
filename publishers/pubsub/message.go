package pubsubsink

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Attributes the sink sets besides the message's own headers.
const (
	// AttrKey carries the outbox key when it is valid UTF-8 of at most
	// maxValueBytes bytes, as it is; an empty key is AttrKey "".
	AttrKey = "outbox-key"
	// AttrKeyBase64 carries any other key, standard base64 with padding.
	AttrKeyBase64 = "outbox-key-base64"
)

// The service's limits on attributes and ordering keys.
const (
	maxAttributes = 100
	maxNameBytes  = 256
	maxValueBytes = 1024
)

// toPubSub converts m to the message Publish sends: the payload as data,
// the headers, the event id (outbox.HeaderEventID) and the key (AttrKey or
// AttrKeyBase64) as attributes, and the key's attribute value as ordering
// key. It returns a permanent error (ErrInvalidMessage, ErrTooLarge) when
// the service would refuse the message.
func toPubSub(m *outbox.Message, maxBytes int) (*pubsub.Message, error) {
	attrs := make(map[string]string, len(m.Headers)+2)
	for name, value := range m.Headers {
		if name == outbox.HeaderEventID {
			continue // reserved; the real id wins
		}
		if err := validateAttr(name, value); err != nil {
			return nil, err
		}
		attrs[name] = value
	}
	attrs[outbox.HeaderEventID] = m.ID.String()
	var orderingKey string
	if m.Key != nil {
		name, value := keyAttr(m.Key)
		if len(value) > maxValueBytes {
			return nil, fmt.Errorf("%w: key of %d bytes is longer than %d as an attribute", ErrInvalidMessage, len(m.Key), maxValueBytes)
		}
		attrs[name] = value
		orderingKey = value
	}
	if len(attrs) > maxAttributes {
		return nil, fmt.Errorf("%w: %d attributes, more than %d", ErrInvalidMessage, len(attrs), maxAttributes)
	}
	msg := &pubsub.Message{Data: m.Payload, Attributes: attrs, OrderingKey: orderingKey}
	if size := proto.Size(&pubsubpb.PubsubMessage{Data: msg.Data, Attributes: attrs, OrderingKey: orderingKey}); size > maxBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded (payload %d), over %d", ErrTooLarge, size, len(m.Payload), maxBytes)
	}
	return msg, nil
}

// validateAttr checks a header against the service's attribute rules and
// the names the sink reserves.
func validateAttr(name, value string) error {
	switch {
	case name == "" || len(name) > maxNameBytes:
		return fmt.Errorf("%w: header name %q: 1 to %d bytes", ErrInvalidMessage, name, maxNameBytes)
	case strings.HasPrefix(strings.ToLower(name), "goog"):
		return fmt.Errorf("%w: header name %q: names starting with goog are reserved by Google", ErrInvalidMessage, name)
	case name == AttrKey || name == AttrKeyBase64:
		return fmt.Errorf("%w: header name %q is reserved for the message key", ErrInvalidMessage, name)
	case len(value) > maxValueBytes:
		return fmt.Errorf("%w: header %q: value of %d bytes, over %d", ErrInvalidMessage, name, len(value), maxValueBytes)
	case !utf8.ValidString(name) || !utf8.ValidString(value):
		return fmt.Errorf("%w: header %q is not valid UTF-8", ErrInvalidMessage, name)
	}
	return nil
}

// keyAttr returns the attribute that carries key.
func keyAttr(key []byte) (name, value string) {
	if utf8.Valid(key) && len(key) <= maxValueBytes {
		return AttrKey, string(key)
	}
	return AttrKeyBase64, base64.StdEncoding.EncodeToString(key)
}

// Key returns the outbox key a message published by the sink carries in
// its attributes: nil when it has none. A consumer that needs the key
// bytes calls it with the message's Attributes.
func Key(attrs map[string]string) ([]byte, error) {
	if v, ok := attrs[AttrKeyBase64]; ok {
		key, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("pubsub: attribute %s: %w", AttrKeyBase64, err)
		}
		return key, nil
	}
	if v, ok := attrs[AttrKey]; ok {
		return []byte(v), nil
	}
	return nil, nil
}

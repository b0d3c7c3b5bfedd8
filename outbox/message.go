package outbox

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits applied when a message is written (Writer.Write and WriteBatch)
// and by ValidateTopic and ValidateHeaders.
const (
	// DefaultMaxPayloadBytes is the default payload limit: 1 MiB.
	DefaultMaxPayloadBytes = 1 << 20
	// MaxTopicLen is the longest accepted topic (Kafka's own limit).
	MaxTopicLen = 249
	// MaxHeaderNameLen is the longest accepted header name.
	MaxHeaderNameLen = 255
	// MaxDedupKeyLen is the longest accepted dedup key.
	MaxDedupKeyLen = 512
)

// HeaderEventID is the header every sink adds with the event id, so that
// consumers can drop duplicates. Messages may not set it themselves.
const HeaderEventID = "outbox-event-id"

// Message is one event. The application fills Topic, Payload and, as needed,
// Key, Headers, DedupKey and DeliverAt; the relay hands the same type, read
// back from the table, to the sinks with ID, Attempt and CreatedAt set.
type Message struct {
	// ID identifies the event. When zero, Write assigns a new UUIDv7, which
	// sorts by creation time.
	ID uuid.UUID
	// Topic is where the event is published: 1-249 bytes of [a-zA-Z0-9._-].
	Topic string
	// Key is the partitioning key (the Kafka message key). Nil means no key.
	Key []byte
	// Payload is the event body, at most the Writer's MaxPayloadBytes.
	Payload []byte
	// Headers are copied to the published message. Names are 1-255 bytes of
	// visible ASCII other than ':'; values are valid UTF-8 without NUL bytes.
	// The name "outbox-event-id" is reserved. Write adds "traceparent"
	// (and "tracestate") from the span of its ctx, unless set here.
	Headers map[string]string
	// DedupKey, when set, makes the write idempotent: a second message with
	// the same DedupKey (or the same ID) is not written again, and Result
	// reports it as a duplicate. At most 512 bytes of UTF-8.
	DedupKey string
	// DeliverAt delays publication until this instant, compared with the
	// database clock. The zero value means "as soon as committed".
	DeliverAt time.Time

	// Attempt is the number of times the relay has claimed the message,
	// including the current one. Set by the relay; ignored by Write.
	Attempt int
	// CreatedAt is the database time of the insert. Set by the relay; ignored
	// by Write.
	CreatedAt time.Time
}

// ValidateTopic reports whether topic is acceptable; the error wraps
// ErrInvalidTopic.
func ValidateTopic(topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	}
	if len(topic) > MaxTopicLen {
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidTopic, len(topic), MaxTopicLen)
	}
	if topic == "." || topic == ".." {
		return fmt.Errorf("%w: %q is reserved", ErrInvalidTopic, topic)
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: byte %q at offset %d is outside [a-zA-Z0-9._-]", ErrInvalidTopic, c, i)
		}
	}
	return nil
}

// ValidateHeaders reports whether every header name and value can be stored
// and carried by the sinks; the error wraps ErrInvalidHeader.
func ValidateHeaders(h map[string]string) error {
	for name, value := range h {
		if err := validateHeaderName(name); err != nil {
			return err
		}
		if !utf8.ValidString(value) {
			return fmt.Errorf("%w: value of %q is not valid UTF-8", ErrInvalidHeader, name)
		}
		if strings.IndexByte(value, 0) >= 0 {
			return fmt.Errorf("%w: value of %q holds a NUL byte", ErrInvalidHeader, name)
		}
	}
	return nil
}

func validateHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidHeader)
	}
	if len(name) > MaxHeaderNameLen {
		return fmt.Errorf("%w: name of %d bytes, longer than %d", ErrInvalidHeader, len(name), MaxHeaderNameLen)
	}
	if name == HeaderEventID {
		return fmt.Errorf("%w: name %q is reserved for the event id", ErrInvalidHeader, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("%w: name %q has byte %q at offset %d (visible ASCII other than ':' only)", ErrInvalidHeader, name, c, i)
		}
	}
	return nil
}

// validate checks msg against the limits; index is its position in a batch.
func (msg *Message) validate(index, maxPayload int) error {
	if err := ValidateTopic(msg.Topic); err != nil {
		return newValidationError(index, "topic", ErrInvalidTopic, err)
	}
	if len(msg.Payload) > maxPayload {
		return &ValidationError{Index: index, Field: "payload", Err: ErrPayloadTooLarge,
			Reason: fmt.Sprintf("%d bytes, more than the limit of %d", len(msg.Payload), maxPayload)}
	}
	if err := ValidateHeaders(msg.Headers); err != nil {
		return newValidationError(index, "headers", ErrInvalidHeader, err)
	}
	if len(msg.DedupKey) > MaxDedupKeyLen || !utf8.ValidString(msg.DedupKey) || strings.IndexByte(msg.DedupKey, 0) >= 0 {
		return &ValidationError{Index: index, Field: "dedup_key", Err: ErrInvalidDedupKey,
			Reason: fmt.Sprintf("must be valid UTF-8 without NUL bytes, at most %d bytes", MaxDedupKeyLen)}
	}
	return nil
}

// newValidationError turns "sentinel: reason" from the Validate functions
// into a ValidationError.
func newValidationError(index int, field string, sentinel, err error) *ValidationError {
	return &ValidationError{Index: index, Field: field, Err: sentinel,
		Reason: strings.TrimPrefix(err.Error(), sentinel.Error()+": ")}
}

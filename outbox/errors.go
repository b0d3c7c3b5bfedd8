package outbox

import (
	"errors"
	"fmt"
)

// Sentinel errors returned (wrapped in a *ValidationError) by the Writer
// before it touches the database. Test for them with errors.Is.
var (
	// ErrInvalidTopic means the topic is empty, too long or holds characters
	// outside [a-zA-Z0-9._-].
	ErrInvalidTopic = errors.New("outbox: invalid topic")
	// ErrPayloadTooLarge means the payload is larger than the Writer's
	// MaxPayloadBytes.
	ErrPayloadTooLarge = errors.New("outbox: payload too large")
	// ErrInvalidHeader means a header name or value cannot be stored or
	// carried by the sinks (see ValidateHeaders).
	ErrInvalidHeader = errors.New("outbox: invalid header")
	// ErrInvalidDedupKey means the dedup key is too long or not valid UTF-8.
	ErrInvalidDedupKey = errors.New("outbox: invalid dedup key")
	// ErrInvalidIdentifier means a schema or table name is not a plain SQL
	// identifier ([A-Za-z_][A-Za-z0-9_]*, bounded length).
	ErrInvalidIdentifier = errors.New("outbox: invalid identifier")
)

// ValidationError describes why a message was rejected. Err is one of the
// sentinel errors above, so errors.Is(err, ErrInvalidTopic) works on it.
type ValidationError struct {
	// Index is the position of the message in a WriteBatch call (0 for Write).
	Index int
	// Field names the offending field: "topic", "payload", "headers" or "dedup_key".
	Field string
	// Reason says what is wrong, in words.
	Reason string
	// Err is the sentinel error for the class of problem.
	Err error
}

// Error implements error.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("%v: message %d: %s: %s", e.Err, e.Index, e.Field, e.Reason)
}

// Unwrap returns the sentinel error, for errors.Is.
func (e *ValidationError) Unwrap() error { return e.Err }

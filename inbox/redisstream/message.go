package redisstream

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/inbox"
	redissink "github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// Message returns the inbox message of an entry that the relay's Redis
// Streams sink appended to stream, the key it was read from, mapped as the
// package documentation says. The error wraps inbox.ErrNoEventID when the
// entry has no valid event id.
func Message(stream string, e redis.XMessage) (inbox.Message, error) {
	str := func(field string) (string, bool) {
		s, ok := e.Values[field].(string)
		return s, ok
	}
	id, _ := str(redissink.FieldEventID)
	eventID, err := inbox.ParseID(id)
	if err != nil {
		return inbox.Message{}, fmt.Errorf("redis entry %s of %s: %w", e.ID, stream, err)
	}
	m := inbox.Message{ID: eventID, Topic: stream, Headers: map[string]string{}}
	if s, ok := str(redissink.FieldKey); ok {
		m.Key = []byte(s)
	}
	if s, ok := str(redissink.FieldPayload); ok {
		m.Payload = []byte(s)
	}
	if s, ok := str(redissink.FieldHeaders); ok {
		if err := json.Unmarshal([]byte(s), &m.Headers); err != nil {
			return inbox.Message{}, fmt.Errorf("redis entry %s of %s: field %s: %w", e.ID, stream, redissink.FieldHeaders, err)
		}
	}
	if s, ok := str(redissink.FieldCreatedAt); ok {
		if m.CreatedAt, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return inbox.Message{}, fmt.Errorf("redis entry %s of %s: field %s: %w", e.ID, stream, redissink.FieldCreatedAt, err)
		}
	}
	return m, nil
}

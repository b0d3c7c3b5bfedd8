// Package adaptertest holds what the tests of the inbox adapters share: the
// events they publish through a sink, and the check that the messages an
// adapter made of the deliveries are those events.
package adaptertest

import (
	"bytes"
	"context"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Traceparent is the W3C trace context the events carry; TraceID is its
// trace id.
const (
	Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	TraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// Events returns fresh events for topic, each with its own id, CreatedAt
// (with nanoseconds, in a zone other than UTC) and payload: one with a
// text key and several headers (traceparent, tracestate, one of the
// application's), one with a key that is not UTF-8, one with an empty
// key, and one without a key or headers.
func Events(topic string) []outbox.Message {
	at := time.Date(2026, 11, 28, 15, 4, 5, 123456789, time.FixedZone("UTC+2", 2*60*60))
	msgs := []outbox.Message{
		{
			Key: []byte("customer-42"),
			Headers: map[string]string{
				outbox.HeaderTraceparent: Traceparent,
				outbox.HeaderTracestate:  "vendor=opaque",
				"tenant":                 "acme",
			},
			Payload: []byte(`{"order":1}`),
		},
		{
			Key:     []byte{0xff, 0x00, 0xfe, 'k'},
			Headers: map[string]string{outbox.HeaderTraceparent: Traceparent},
			Payload: []byte{0x00, 0x01, 0xff},
		},
		{Key: []byte{}, Payload: []byte(`{"order":3}`)},
		{Payload: []byte(`{"order":4}`)},
	}
	for i := range msgs {
		msgs[i].ID = uuid.New()
		msgs[i].Topic = topic
		msgs[i].Attempt = 1
		msgs[i].CreatedAt = at.Add(time.Duration(i) * time.Hour)
	}
	return msgs
}

// Publish publishes msgs with p, failing t unless every one was
// acknowledged.
func Publish(t testing.TB, p publishers.Publisher, msgs []outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Publish(ctx, msgs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// Check fails t unless got holds exactly the events sent, in any order,
// as delivered on topic: same id, topic, key (nil only for a nil key),
// headers and payload, and CreatedAt truncated to precision, or zero when
// precision is 0 (the sink does not carry it).
func Check(t testing.TB, got []inbox.Message, sent []outbox.Message, topic string, precision time.Duration) {
	t.Helper()
	if len(got) != len(sent) {
		t.Fatalf("%d messages, want %d", len(got), len(sent))
	}
	byID := make(map[uuid.UUID]inbox.Message, len(got))
	for _, m := range got {
		byID[m.ID] = m
	}
	for _, want := range sent {
		m, ok := byID[want.ID]
		if !ok {
			t.Errorf("event %s was not delivered", want.ID)
			continue
		}
		createdAt := time.Time{}
		if precision > 0 {
			createdAt = want.CreatedAt.Truncate(precision)
		}
		if m.Topic != topic {
			t.Errorf("event %s: Topic %q, want %q", want.ID, m.Topic, topic)
		}
		if !bytes.Equal(m.Key, want.Key) || (m.Key == nil) != (want.Key == nil) {
			t.Errorf("event %s: Key %#v, want %#v", want.ID, m.Key, want.Key)
		}
		if !m.CreatedAt.Equal(createdAt) {
			t.Errorf("event %s: CreatedAt %v, want %v", want.ID, m.CreatedAt, createdAt)
		}
		if !maps.Equal(m.Headers, want.Headers) {
			t.Errorf("event %s: Headers %v, want %v", want.ID, m.Headers, want.Headers)
		}
		if !bytes.Equal(m.Payload, want.Payload) {
			t.Errorf("event %s: Payload %q, want %q", want.ID, m.Payload, want.Payload)
		}
	}
}

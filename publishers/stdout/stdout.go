// Package stdout is a debugging sink: it writes each message as one JSON
// line to an io.Writer (standard output by default) and always succeeds
// unless the writer fails.
//
// A line holds the event id, topic, key (null without one), payload,
// headers, attempt and creation time. Key and payload are shown as text;
// when one is not valid UTF-8, its exact bytes are added in base64 as
// key_base64 or payload_base64 (the text form then has the invalid bytes
// replaced), so that nothing is lost.
package stdout

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher writes messages as JSON lines. Its methods are safe for
// concurrent use; each line is one Write.
type Publisher struct {
	mu sync.Mutex
	w  io.Writer
}

// New returns a Publisher writing to w, or to os.Stdout when w is nil.
func New(w io.Writer) *Publisher {
	if w == nil {
		w = os.Stdout
	}
	return &Publisher{w: w}
}

// line is the JSON form of one message.
type line struct {
	ID            string            `json:"id"`
	Topic         string            `json:"topic"`
	Key           *string           `json:"key"`
	KeyBase64     string            `json:"key_base64,omitempty"`
	Payload       string            `json:"payload"`
	PayloadBase64 string            `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Attempt       int               `json:"attempt"`
	CreatedAt     time.Time         `json:"created_at"`
}

// Publish writes one line per message, in order, and returns once every
// line was written. A write error fails the whole batch as unavailable
// (the relay keeps the rows and retries later); the next Publish writes
// again. A context that has ended stops it before the next line.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range msgs {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := json.Marshal(toLine(&msgs[i]))
		if err != nil {
			return fmt.Errorf("stdout: event %s: %w", msgs[i].ID, err)
		}
		if _, err := p.w.Write(append(b, '\n')); err != nil {
			return publishers.Unavailable(fmt.Errorf("stdout: write: %w", err))
		}
	}
	return nil
}

// toLine converts m to its JSON line.
func toLine(m *outbox.Message) line {
	l := line{ID: m.ID.String(), Topic: m.Topic, Payload: string(m.Payload), Headers: m.Headers, Attempt: m.Attempt, CreatedAt: m.CreatedAt}
	if !utf8.Valid(m.Payload) {
		l.PayloadBase64 = base64.StdEncoding.EncodeToString(m.Payload)
	}
	if m.Key != nil {
		k := string(m.Key)
		l.Key = &k
		if !utf8.Valid(m.Key) {
			l.KeyBase64 = base64.StdEncoding.EncodeToString(m.Key)
		}
	}
	return l
}

// Close does nothing; the writer belongs to the caller.
func (p *Publisher) Close() error { return nil }

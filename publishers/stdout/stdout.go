// Package stdout is a debugging sink: it writes each message as one JSON
// line to an io.Writer (standard output by default) and always succeeds
// unless the writer fails.
package stdout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher writes messages as JSON lines.
type Publisher struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// New returns a Publisher writing to w, or to os.Stdout when w is nil.
func New(w io.Writer) *Publisher {
	if w == nil {
		w = os.Stdout
	}
	return &Publisher{enc: json.NewEncoder(w)}
}

// line is the JSON form of one message. Key and payload are shown as text
// when they are valid UTF-8 by encoding/json's rules (invalid bytes are
// replaced), which is what a human debugging wants.
type line struct {
	ID        string            `json:"id"`
	Topic     string            `json:"topic"`
	Key       *string           `json:"key"`
	Payload   string            `json:"payload"`
	Headers   map[string]string `json:"headers,omitempty"`
	Attempt   int               `json:"attempt"`
	CreatedAt time.Time         `json:"created_at"`
}

// Publish writes one line per message. A write error fails the whole batch
// as unavailable: the relay keeps the rows and retries later.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		if err := ctx.Err(); err != nil {
			return err
		}
		l := line{ID: m.ID.String(), Topic: m.Topic, Payload: string(m.Payload), Headers: m.Headers, Attempt: m.Attempt, CreatedAt: m.CreatedAt}
		if m.Key != nil {
			k := string(m.Key)
			l.Key = &k
		}
		if err := p.enc.Encode(l); err != nil {
			return publishers.Unavailable(fmt.Errorf("stdout: write: %w", err))
		}
	}
	return nil
}

// Close does nothing; the writer belongs to the caller.
func (p *Publisher) Close() error { return nil }

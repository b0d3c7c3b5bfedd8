package pubsubsink

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"cloud.google.com/go/pubsub/v2"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher publishes outbox messages to Pub/Sub topics with the Google
// client, one client publisher per topic with message ordering on.
// Publish returns once the service answered each message with its id, or
// it failed. Its methods are safe for concurrent use.
type Publisher struct {
	cfg    Config
	logger *slog.Logger

	mu     sync.Mutex
	closed bool
	cur    *conn // nil after a drop until the next call
}

// New returns a Publisher for cfg. It does not connect; the first Publish
// or Probe does. Without an endpoint it finds Application Default
// Credentials now, and fails without them. The error of an invalid cfg
// wraps ErrInvalidConfig.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := dial(cfg) // fails early without credentials
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{cfg: cfg, logger: logger, cur: c}, nil
}

// Config returns the configuration in effect, defaults applied.
func (p *Publisher) Config() Config { return p.cfg }

// KeyBatches reports true: the client sends one ordering key's messages
// one request at a time, in order, and after a failed request fails the
// key's later messages without sending them (publishers.KeyBatcher).
func (p *Publisher) KeyBatches() bool { return true }

// Publish publishes msgs and waits for the service's message ids.
//
// It returns nil when every message got its id, a publishers.Errors when
// the outcome differs between messages, and a single error when the whole
// call failed alike; failures are classified as the package documentation
// says. One key's messages of one topic go out in their order, one request
// at a time; once one fails, the key's later ones fail unsent
// (pubsub.ErrPublishingPaused), and Publish then resumes the key for the
// next call. Nothing is retried.
//
// When ctx ends first, Publish returns at once with ctx's error for the
// messages without an id, and hands nothing more to the client; a message
// handed to it already may still be stored.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	c, err := p.conn()
	if err != nil {
		return classify(fmt.Errorf("pubsub: publish: %w", err))
	}
	if len(msgs) == 0 {
		return nil
	}
	results := make([]error, len(msgs))
	pending := make([]*pubsub.PublishResult, len(msgs))
	keys := make([]string, len(msgs)) // ordering keys
	for i := range msgs {
		if err := ctx.Err(); err != nil {
			for j := i; j < len(msgs); j++ {
				results[j] = fmt.Errorf("not sent: %w", err)
			}
			break
		}
		m, err := toPubSub(&msgs[i], p.cfg.MaxMessageBytes)
		if err != nil {
			results[i] = err
			continue
		}
		keys[i] = m.OrderingKey
		pending[i] = c.topic(msgs[i].Topic).Publish(ctx, m)
	}
	settled := await(ctx, pending, results)
	resume(c, msgs, keys, results, settled)
	for i, err := range results {
		if unreachable(err) {
			p.drop(c)
		}
		if err != nil {
			if p.isClosed() {
				err = fmt.Errorf("%w: %w", ErrClosed, err)
			}
			results[i] = classify(fmt.Errorf("pubsub: topic %q: event %s: %w", msgs[i].Topic, msgs[i].ID, err))
		}
	}
	return publishers.Summarize(results)
}

// await waits for each pending result within ctx, records the outcomes
// and reports which results settled (got an id or an error of the
// client, not of ctx).
func await(ctx context.Context, pending []*pubsub.PublishResult, results []error) []bool {
	settled := make([]bool, len(pending))
	for i, r := range pending {
		if r == nil {
			continue
		}
		select {
		case <-r.Ready():
			_, results[i] = r.Get(ctx)
			settled[i] = true
		case <-ctx.Done():
			results[i] = fmt.Errorf("no message id before the context ended: %w", ctx.Err())
		}
	}
	return settled
}

// resume resumes each ordering key whose messages of the call failed at
// the client, once all of the key's messages of the call settled: the
// client pauses a key after a failed request so that nothing of it is sent
// out of order, and the relay's retry of the failed messages is the next
// in order. A key left paused (its request outlived ctx) fails its next
// message with pubsub.ErrPublishingPaused, and that call resumes it.
func resume(c *conn, msgs []outbox.Message, keys []string, results []error, settled []bool) {
	type state struct{ failed, unsettled bool }
	byKey := map[[2]string]*state{}
	for i, key := range keys {
		if key == "" {
			continue
		}
		k := [2]string{msgs[i].Topic, key}
		s := byKey[k]
		if s == nil {
			s = &state{}
			byKey[k] = s
		}
		s.failed = s.failed || (settled[i] && results[i] != nil)
		s.unsettled = s.unsettled || !settled[i]
	}
	for k, s := range byKey {
		if s.failed && !s.unsettled {
			c.resume(k[0], k[1])
		}
	}
}

// conn returns the current client, making one after a drop.
func (p *Publisher) conn() (*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.cur == nil {
		c, err := dial(p.cfg)
		if err != nil {
			return nil, err
		}
		p.cur = c
	}
	return p.cur, nil
}

// drop closes c, in the background, unless it was dropped already; the
// next call makes a new client.
func (p *Publisher) drop(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == c {
		p.cur = nil
		p.logger.Debug("pubsub: the service was unreachable; the next call makes a new client")
		go c.close()
	}
}

// Close closes the client's connections, which fails the requests in
// flight at once, then stops the client publishers; it does not wait for
// Publish calls, whose messages without an id then fail as unavailable.
// Publish and Probe fail with ErrClosed afterwards. Close is idempotent
// and returns nil.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	c := p.cur
	p.cur = nil
	p.mu.Unlock()
	if c != nil {
		c.close()
	}
	return nil
}

func (p *Publisher) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

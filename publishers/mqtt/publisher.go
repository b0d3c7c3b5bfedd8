package mqttsink

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// ErrClosed is the error of a Publish or Probe after Close.
var ErrClosed = errors.New("mqttsink: publisher closed")

// Publisher publishes outbox messages to an MQTT 5 broker over one
// connection, dialled by the first Publish or Probe and again after it is
// lost. Its methods are safe for concurrent use.
type Publisher struct {
	cfg  Config
	addr string

	mu     sync.Mutex
	closed bool
	cur    *conn
}

// New returns a Publisher for cfg; it does not connect. The error of an
// invalid cfg wraps ErrInvalidConfig.
func New(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	addr, _ := cfg.Address()
	return &Publisher{cfg: cfg, addr: addr}, nil
}

// Config returns the configuration in use, defaults filled; it prints
// without the password.
func (p *Publisher) Config() Config { return p.cfg }

// KeyBatches reports true: a key's later messages of a call are not sent
// once one failed other than permanently.
func (p *Publisher) KeyBatches() bool { return true }

// connection returns the live connection, dialling one if there is none.
func (p *Publisher) connection(ctx context.Context) (*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if p.cur != nil && !p.cur.lost() {
		return p.cur, nil
	}
	if p.cur != nil {
		p.cfg.Logger.Warn("mqtt: connection lost; dialling again", "error", p.cur.err)
		p.cur.close()
	}
	c, err := dial(ctx, p.cfg, p.addr)
	if err != nil {
		return nil, err
	}
	p.cur = c
	return c, nil
}

// Publish publishes msgs and returns nil once the broker acknowledged
// every one, a publishers.Errors when outcomes differ, or one error for
// the whole call. A key's messages go one after the other; keys (and
// messages without a key) in parallel, up to Config.MaxInFlight. Nothing
// is sent once ctx ended, and nothing is retried.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mqtt: publish: %w", err)
	}
	c, err := p.connection(ctx)
	if err != nil {
		return publishers.Unavailable(fmt.Errorf("mqtt: %w", err))
	}
	results := make([]error, len(msgs))
	pubs := make([]*paho.Publish, len(msgs))
	for i := range msgs {
		if pubs[i], err = toPublish(&msgs[i], p.cfg.QoS); err != nil {
			results[i] = publishers.Permanent(err)
		}
	}
	slots := make(chan struct{}, p.cfg.MaxInFlight)
	var wg sync.WaitGroup
	for _, group := range byKey(msgs) {
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-ctx.Done():
			}
			var stop error // set once a message of the key failed other than permanently
			for _, i := range group {
				switch {
				case results[i] != nil:
					continue
				case stop != nil:
					results[i] = fmt.Errorf("not sent: an earlier message of its key failed: %w", stop)
					continue
				case ctx.Err() != nil:
					results[i] = fmt.Errorf("not sent: %w", ctx.Err())
					continue
				}
				results[i] = p.publishOne(ctx, c, pubs[i])
				if results[i] != nil && !publishers.IsPermanent(results[i]) {
					stop = results[i]
				}
			}
		})
	}
	wg.Wait()
	for i, err := range results {
		if err != nil {
			results[i] = fmt.Errorf("mqtt: topic %q: event %s: %w", msgs[i].Topic, msgs[i].ID, err)
		}
	}
	return publishers.Summarize(results)
}

// publishOne publishes pub and waits for its acknowledgement.
func (p *Publisher) publishOne(ctx context.Context, c *conn, pub *paho.Publish) error {
	if c.lost() {
		return publishers.Unavailable(c.err)
	}
	resp, err := c.c.Publish(ctx, pub)
	switch {
	case resp != nil && resp.ReasonCode >= 0x80:
		return reasonError(resp.ReasonCode, resp.Properties)
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("no acknowledgement before the context ended: %w", ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		// No answer within PublishTimeout: the connection may be silently
		// broken; the next call dials afresh.
		c.lose(fmt.Errorf("no acknowledgement within %v", p.cfg.PublishTimeout))
		return publishers.Unavailable(c.err)
	case errors.Is(err, paho.ErrInvalidArguments):
		return publishers.Permanent(fmt.Errorf("%w: %w", ErrInvalidMessage, err))
	}
	c.lose(err)
	return publishers.Unavailable(err)
}

// reasonError classifies a PUBACK's or PUBREC's failure reason code.
func reasonError(code byte, props *paho.PublishResponseProperties) error {
	reason := ""
	if props != nil && props.ReasonString != "" {
		reason = ": " + props.ReasonString
	}
	err := fmt.Errorf("refused by the broker (reason 0x%02x%s)", code, reason)
	switch code {
	case 0x87, 0x90, 0x95, 0x99: // not authorized, topic name invalid, packet too large, payload format invalid
		return publishers.Permanent(err)
	}
	return err
}

// byKey returns the indexes of msgs grouped by key, each group in order; a
// message without key is a group of its own.
func byKey(msgs []outbox.Message) [][]int {
	var groups [][]int
	pos := map[string]int{}
	for i := range msgs {
		if msgs[i].Key == nil {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := pos[string(msgs[i].Key)]
		if !ok {
			g = len(groups)
			pos[string(msgs[i].Key)] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// Probe reports whether the broker answers, publishing nothing: it dials
// when there is no live connection and makes one round trip (an
// UNSUBSCRIBE of a filter never subscribed). A broker that does not answer
// in time has its connection dropped.
func (p *Publisher) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mqtt: probe: %w", err)
	}
	c, err := p.connection(ctx)
	if err != nil {
		return publishers.Unavailable(fmt.Errorf("mqtt: probe: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	if _, err := c.c.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"outboxrelay/probe"}}); err != nil {
		c.lose(fmt.Errorf("probe: %w", err))
		return publishers.Unavailable(fmt.Errorf("mqtt: probe: %w", err))
	}
	return nil
}

// Close disconnects; Publish and Probe fail with ErrClosed afterwards. It
// is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.cur != nil {
		p.cur.close()
		p.cur = nil
	}
	return nil
}

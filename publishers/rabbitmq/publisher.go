package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher publishes outbox messages to RabbitMQ with amqp091-go, with
// publisher confirms: Publish returns once the broker confirmed every
// message, or it failed. Its methods are safe for concurrent use.
type Publisher struct {
	cfg Config

	mu   sync.Mutex
	link *link      // the connection, nil before the first dial and after Close
	idle []*channel // open channels of link, for the next calls

	// dialing holds a token while one caller dials.
	dialing chan struct{}
	// exchanges are the exchange names known to exist (passively declared).
	exchanges sync.Map

	closed    atomic.Bool
	closeOnce sync.Once
}

// New returns a Publisher for cfg. It does not connect: the first Publish
// or Probe does. The error of an invalid cfg is a *ConfigError, which
// wraps ErrInvalidConfig.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Publisher{cfg: cfg, dialing: make(chan struct{}, 1)}, nil
}

// Config returns the configuration in effect, defaults filled in. Its
// String and LogValue hide the password.
func (p *Publisher) Config() Config { return p.cfg }

// String describes the publisher without secrets.
func (p *Publisher) String() string { return "rabbitmq.Publisher{" + redactURL(p.cfg.URL) + "}" }

// Close closes the connection to the broker, waiting at most a second for
// the broker to answer; Publish and Probe fail with ErrClosed afterwards.
// It does not wait for Publish calls in flight: their channels close with
// the connection and they end at once, their unconfirmed messages failed
// as unavailable. Close is idempotent and returns nil.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.mu.Lock()
		l := p.link
		p.link, p.idle = nil, nil
		p.mu.Unlock()
		if l != nil {
			l.close()
		}
	})
	return nil
}

// outgoing is a message of a Publish call on its way.
type outgoing struct {
	index int // in the call's msgs
	dest  Destination
	pub   amqp.Publishing
}

// Publish sends msgs and waits for the broker to confirm them.
//
// It returns nil when every message was confirmed, a publishers.Errors
// with one entry per message when the outcome differs between messages,
// and a single error when every message failed because the broker is
// unavailable. Each failure is classified as described in the package
// documentation.
//
// Every message of the call goes on one channel, in the order of msgs, so
// the messages routed to one queue arrive in that order. The channel is
// pipelined: up to MaxInFlight messages are sent before their confirms are
// awaited. Before sending, each exchange not yet known to exist is checked
// (a passive declare), so that a missing exchange fails only its own
// messages.
//
// When ctx (or PublishTimeout) ends first, Publish returns at once with
// ctx's error for the messages not yet confirmed, and sends nothing more
// for them; their channel is closed. A message already written to the
// socket may still be enqueued: its outcome is unknown. Should a write be
// stuck on a broker that does not read, the connection is broken off so
// that nothing more goes out. Publish does not keep msgs after it returns.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if p.closed.Load() {
		return classify(ErrClosed) // not the messages' fault: spend no attempt
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return classify(fmt.Errorf("rabbitmq: publish: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()

	results := make([]error, len(msgs))
	out := make([]outgoing, 0, len(msgs))
	var unknown []string // exchanges to check, in first-seen order
	checking := map[string]bool{}
	for i := range msgs {
		m := &msgs[i]
		o, err := p.prepare(m)
		if err != nil {
			results[i] = classify(fmt.Errorf("rabbitmq: event %s: %w", m.ID, err))
			continue
		}
		o.index = i
		out = append(out, o)
		if ex := o.dest.Exchange; ex != "" && !checking[ex] {
			if _, known := p.exchanges.Load(ex); !known {
				checking[ex] = true
				unknown = append(unknown, ex)
			}
		}
	}
	if len(out) > 0 {
		p.publish(ctx, msgs, out, unknown, results)
	}
	return publishers.Summarize(results)
}

// prepare maps m to its destination and the AMQP message it becomes.
func (p *Publisher) prepare(m *outbox.Message) (outgoing, error) {
	dest, err := ParseDestination(m.Topic, p.cfg.Exchange)
	if err != nil {
		return outgoing{}, err
	}
	if len(m.Payload) > p.cfg.MaxMessageBytes {
		return outgoing{}, fmt.Errorf("%w: payload of %d bytes exceeds MaxMessageBytes (%d)", ErrTooLarge, len(m.Payload), p.cfg.MaxMessageBytes)
	}
	pub, err := toPublishing(m)
	if err != nil {
		return outgoing{}, err
	}
	return outgoing{dest: dest, pub: pub}, nil
}

// publish checks the unknown exchanges, then sends out on one channel and
// sets the results of its messages.
func (p *Publisher) publish(ctx context.Context, msgs []outbox.Message, out []outgoing, unknown []string, results []error) {
	fail := func(err error, keep func(o *outgoing) bool) {
		kept := out[:0]
		for _, o := range out {
			if keep(&o) {
				kept = append(kept, o)
				continue
			}
			results[o.index] = classify(fmt.Errorf("rabbitmq: event %s: %w", msgs[o.index].ID, err))
		}
		out = kept
	}
	all := func(*outgoing) bool { return false }

	c, err := p.acquire(ctx)
	if err != nil {
		fail(err, all)
		return
	}
	for _, ex := range unknown {
		err := p.checkExchange(ctx, c, ex)
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil, !c.link.alive():
			// The check was abandoned (c is closed once it returns), or the
			// connection is gone: no message can go now.
			fail(err, all)
			return
		}
		// The broker refused the exchange (404: it does not exist), which
		// closed c: its messages fail, the others go on a new channel.
		fail(fmt.Errorf("exchange %q: %w", ex, err), func(o *outgoing) bool { return o.dest.Exchange != ex })
		c.discard()
		if len(out) == 0 {
			return
		}
		if c, err = p.acquire(ctx); err != nil {
			fail(err, all)
			return
		}
	}
	clean := p.send(ctx, c, msgs, out, results)
	p.release(c, clean)
}

// checkExchange declares exchange passively on c: nil when it exists, the
// broker's error otherwise (404 when it does not, which closes c). Known
// exchanges are remembered.
func (p *Publisher) checkExchange(ctx context.Context, c *channel, exchange string) error {
	err := callCtx(ctx, func() error {
		return c.ch.ExchangeDeclarePassive(exchange, amqp.ExchangeDirect, false, false, false, false, nil)
	}, c.discard)
	if err == nil {
		p.exchanges.Store(exchange, struct{}{})
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	return c.link.lost(err)
}

// send publishes out on c, pipelined, and waits for the confirms, within
// ctx; it sets the results of out's messages. It reports whether c is
// clean: every message sent was confirmed and its return, if any, read.
func (p *Publisher) send(ctx context.Context, c *channel, msgs []outbox.Message, out []outgoing, results []error) bool {
	confirms := make([]*amqp.DeferredConfirmation, len(out))
	// Returns are matched to messages by message_id, the event id.
	returns := map[string][]*ReturnedError{}
	onReturn := func(r amqp.Return) {
		returns[r.MessageId] = append(returns[r.MessageId], &ReturnedError{
			Destination: Destination{Exchange: r.Exchange, RoutingKey: r.RoutingKey},
			Code:        int(r.ReplyCode), Text: r.ReplyText,
		})
	}

	// Each return is queued before its message's confirm is settled: once a
	// confirm is seen, draining reads the returns of every message up to
	// it. So at most MaxInFlight returns wait unread, which the returns
	// channel holds: amqp091-go would drop a return that found it full.
	drain := func() {
		for {
			select {
			case r, ok := <-c.returns:
				if !ok { // the channel closed: no more returns
					c.returns = nil
					return
				}
				onReturn(r)
			default:
				return
			}
		}
	}

	// A write blocked past ctx's end, on a broker that does not read, is
	// stuck for good: after a grace period the connection is broken off.
	var writing atomic.Bool
	var writes atomic.Uint64
	stop := context.AfterFunc(ctx, func() {
		seen := writes.Load()
		if !writing.Load() {
			return
		}
		time.AfterFunc(stuckWriteGrace, func() {
			if writing.Load() && writes.Load() == seen {
				c.link.abort()
			}
		})
	})
	defer stop()

	window := p.cfg.MaxInFlight
	next, oldest := 0, 0 // next to send; oldest not yet confirmed
	var stopped error    // why sending stopped early
	for oldest < len(out) {
		if stopped == nil && next < len(out) && next-oldest < window {
			o := &out[next]
			writes.Add(1)
			writing.Store(true)
			if err := ctx.Err(); err != nil {
				writing.Store(false)
				stopped = err
				continue
			}
			dc, err := c.ch.PublishWithDeferredConfirm(o.dest.Exchange, o.dest.RoutingKey, true, false, o.pub)
			writing.Store(false)
			if err != nil {
				stopped = err
				continue
			}
			confirms[next] = dc
			next++
			continue
		}
		if oldest == next {
			break // sending stopped; nothing left to wait for
		}
		select {
		case r, ok := <-c.returns:
			if !ok {
				c.returns = nil // the channel closed; the confirms say how
				continue
			}
			onReturn(r)
		case <-confirms[oldest].Done():
			oldest++
			drain()
		case <-ctx.Done():
			stopped = ctx.Err()
			oldest = len(out)
		}
	}
	drain()

	returned := matchReturns(out, returns)
	clean := stopped == nil
	for j := range out {
		o := &out[j]
		var err error
		switch dc := confirms[j]; {
		case dc == nil: // not sent
			err = p.unsent(ctx, c, o, stopped)
		case returned[j] != nil:
			err = returned[j]
		case !isDone(dc):
			err = fmt.Errorf("no confirm from the broker: %w", stopped)
			clean = false
		case dc.Acked():
			continue
		case c.ch.IsClosed():
			err = p.closedError(c, o)
			clean = false
		default:
			err = fmt.Errorf("%w (destination %s)", ErrNacked, o.dest)
		}
		results[o.index] = classify(fmt.Errorf("rabbitmq: event %s: %w", msgs[o.index].ID, err))
	}
	return clean
}

// errAmbiguousReturn is the error of the messages of an event id that
// appears more than once in a call when some, not all, were returned: it
// is unknown which, so none is failed permanently and none is taken as
// delivered.
var errAmbiguousReturn = errors.New("rabbitmq: the event id appears more than once in the call and the broker returned some of its messages, not all: which is unknown")

// matchReturns gives each message of out the return the broker sent for
// it, by message_id: nil when it was not returned. An id that several
// messages share, of which fewer were returned, gets errAmbiguousReturn
// for all of them.
func matchReturns(out []outgoing, returns map[string][]*ReturnedError) []error {
	matched := make([]error, len(out))
	if len(returns) == 0 {
		return matched
	}
	count := map[string]int{}
	for j := range out {
		if id := out[j].pub.MessageId; len(returns[id]) > 0 {
			count[id]++
		}
	}
	for j := range out {
		id := out[j].pub.MessageId
		switch rs := returns[id]; {
		case len(rs) == 0:
		case len(rs) >= count[id]:
			matched[j] = rs[0]
			returns[id] = rs[1:]
			count[id]--
		default:
			matched[j] = errAmbiguousReturn
		}
	}
	return matched
}

// stuckWriteGrace is how long a write may go on after its Publish's
// context ended before the connection is broken off.
const stuckWriteGrace = 100 * time.Millisecond

// isDone reports whether dc has its confirm.
func isDone(dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}

// unsent returns the error of o, which was not sent because sending
// stopped with the error stopped.
func (p *Publisher) unsent(ctx context.Context, c *channel, o *outgoing, stopped error) error {
	switch {
	case ctx.Err() != nil && errors.Is(stopped, ctx.Err()):
		return fmt.Errorf("not sent: %w", stopped)
	case c.ch.IsClosed() || !c.link.alive():
		return p.closedError(c, o)
	default:
		return fmt.Errorf("not sent: %w", c.link.lost(stopped))
	}
}

// closedError returns the error of o, whose confirm the closing of c
// settled, or which c closed before it could be sent: the broker's reason
// when it was o's fault (its exchange is missing, it is over the broker's
// max_message_size), and otherwise ErrChannelClosed, or ErrConnectionLost
// when the whole connection went.
func (p *Publisher) closedError(c *channel, o *outgoing) error {
	reason := c.closeReason()
	if !c.link.alive() || reason == nil {
		cause := error(amqp.ErrClosed)
		if reason != nil {
			cause = reason
		}
		return fmt.Errorf("%w: %w", ErrConnectionLost, cause)
	}
	if ex, ok := missingExchange(reason); ok {
		p.exchanges.Delete(ex)
		if o.dest.Exchange == ex {
			return fmt.Errorf("exchange %q: %w", ex, reason)
		}
	}
	if limit, ok := brokerMaxSize(reason); ok && len(o.pub.Body) > limit {
		return fmt.Errorf("%w: payload of %d bytes exceeds the broker's max_message_size (%d): %w", ErrTooLarge, len(o.pub.Body), limit, reason)
	}
	return fmt.Errorf("%w (%v)", ErrChannelClosed, reason)
}

package natssink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher publishes outbox messages to NATS JetStream streams: each
// message is published asynchronously on one connection, and Publish
// returns once the stream acknowledged each (its PubAck), or failed. Its
// methods are safe for concurrent use.
type Publisher struct {
	cfg    Config
	opts   []nats.Option
	logger *slog.Logger

	mu      sync.Mutex
	closed  bool
	cur     *conn    // the live connection, or nil
	dialing *dialing // the connection attempt in progress, or nil
}

// noRetry turns off the client's own re-publish of a message that met no
// responders: it would publish again in the background, after Publish
// returned; Publish asks the server why instead.
var noRetry = []jetstream.PublishOpt{jetstream.WithRetryAttempts(0)}

// New returns a Publisher for cfg. It does not connect: the first Publish
// or Probe does. The error of an invalid cfg is a *ConfigError, which
// wraps ErrInvalidConfig.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{cfg: cfg, opts: natsOptions(cfg), logger: logger}, nil
}

// Config returns the configuration in effect, defaults applied. It prints
// and logs without secrets.
func (p *Publisher) Config() Config { return p.cfg }

// Publish publishes msgs and waits for their streams' acknowledgements.
//
// It returns nil when every message was acknowledged (a PubAck that marks
// the message a duplicate included: the stream already holds it), a
// publishers.Errors with one entry per message when the outcome differs
// between messages, and a single error when the whole call failed alike
// (wrapping publishers.ErrUnavailable when the server could not be
// reached). Each failure is classified as described in the package
// documentation.
//
// The messages are sent in their order in msgs on one connection, up to
// Config.MaxInFlight unacknowledged at a time, so that one subject's
// messages are stored in that order when all succeed. Nothing is retried:
// the relay does that.
//
// When ctx ends first, Publish returns at once with ctx's error for the
// messages not acknowledged, and sends nothing more. A message already
// written to the connection may still be stored (its outcome is unknown;
// a later retry within the stream's duplicate window is dropped by the
// stream). Publish does not keep msgs after it returns.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if p.isClosed() {
		return publishers.Unavailable(ErrClosed) // not the messages' fault: spend no attempt
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return classify(fmt.Errorf("nats: publish: %w", err))
	}
	c, err := p.connection(ctx)
	if err != nil {
		return classify(fmt.Errorf("nats: publish: %w", err))
	}

	results := make([]error, len(msgs))
	out := make([]*nats.Msg, len(msgs))
	for i := range msgs {
		out[i], results[i] = toNATS(&msgs[i], c.maxPayload)
	}
	futures := c.send(ctx, out, results)
	p.await(ctx, c, msgs, futures, results)
	p.confirmNoStream(ctx, c, msgs, results)
	for i, err := range results {
		if err != nil {
			results[i] = classify(fmt.Errorf("nats: subject %q: event %s: %w", msgs[i].Topic, msgs[i].ID, err))
		}
	}
	return publishers.Summarize(results)
}

// future is a message sent and awaiting its PubAck.
type future struct {
	i   int // index in msgs
	paf jetstream.PubAckFuture
}

// send publishes the messages of out (nil for those already refused) in
// order, each once an in-flight slot is free, and returns their futures.
// When ctx ends or the connection dies, the messages not sent yet get that
// error in results.
func (c *conn) send(ctx context.Context, out []*nats.Msg, results []error) []future {
	futures := make([]future, 0, len(out))
	for i, m := range out {
		if m == nil {
			continue
		}
		err := ctx.Err()
		if err == nil {
			err = c.acquire(ctx)
		}
		if err != nil {
			for j := i; j < len(out); j++ {
				if out[j] != nil {
					results[j] = fmt.Errorf("not sent: %w", err)
				}
			}
			break
		}
		paf, err := c.js.PublishMsgAsync(m, noRetry...)
		if err != nil {
			c.release()
			results[i] = err
			continue
		}
		futures = append(futures, future{i, paf})
	}
	return futures
}

// await waits for the PubAck of each future, in order, within ctx and
// while the connection lives, and records the outcomes in results.
func (p *Publisher) await(ctx context.Context, c *conn, msgs []outbox.Message, futures []future, results []error) {
	for k, f := range futures {
		select {
		case ack := <-f.paf.Ok():
			p.acknowledged(&msgs[f.i], ack)
		case err := <-f.paf.Err():
			results[f.i] = err
		case <-ctx.Done():
			p.settle(msgs, futures[k:], results, fmt.Errorf("no PubAck before the context ended: %w", ctx.Err()))
			return
		case <-c.dead:
			err := c.lost()
			if p.isClosed() {
				err = ErrClosed
			}
			p.settle(msgs, futures[k:], results, err)
			return
		}
	}
}

// settle records the outcome of the futures that have one already, and
// err for the others.
func (p *Publisher) settle(msgs []outbox.Message, futures []future, results []error, err error) {
	for _, f := range futures {
		select {
		case ack := <-f.paf.Ok():
			p.acknowledged(&msgs[f.i], ack)
		case e := <-f.paf.Err():
			results[f.i] = e
		default:
			results[f.i] = err
		}
	}
}

// acknowledged notes a PubAck; one that marks a duplicate is logged at
// Debug level: the stream already held the event, from an earlier attempt
// within its duplicate window.
func (p *Publisher) acknowledged(m *outbox.Message, ack *jetstream.PubAck) {
	if ack.Duplicate {
		p.logger.Debug("nats: the stream already held the event; duplicate dropped",
			"subject", m.Topic, "event_id", m.ID, "stream", ack.Stream, "seq", ack.Sequence)
	}
}

// confirmNoStream asks the server, once per subject, why a message met no
// responders: no stream captures its subject (permanent: ErrNoStream), a
// stream does but did not answer (transient: ErrStreamSilent), or
// JetStream itself does not answer (unavailable: ErrNoJetStream). It
// replaces those errors in results.
func (p *Publisher) confirmNoStream(ctx context.Context, c *conn, msgs []outbox.Message, results []error) {
	verdicts := map[string]error{}
	for i, err := range results {
		if !errors.Is(err, jetstream.ErrNoStreamResponse) {
			continue
		}
		subject := msgs[i].Topic
		verdict, ok := verdicts[subject]
		if !ok {
			verdict = p.noStreamVerdict(ctx, c, subject)
			verdicts[subject] = verdict
		}
		results[i] = verdict
	}
}

// noStreamVerdict looks up the stream that captures subject.
func (p *Publisher) noStreamVerdict(ctx context.Context, c *conn, subject string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	stream, err := c.js.StreamNameBySubject(ctx, subject)
	switch {
	case err == nil:
		return fmt.Errorf("%w (stream %s; no responders): its leader may be changing", ErrStreamSilent, stream)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("%w; create one, e.g. nats stream add <NAME> --subjects %q", ErrNoStream, subject)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("no responders for the subject, and %w: %w", ErrNoJetStream, err)
	default:
		return fmt.Errorf("no responders for the subject, and the stream lookup failed: %w", err)
	}
}

// Close closes the connection and returns within about a second: it does
// not wait for Publish calls in flight, whose unacknowledged messages then
// fail as unavailable. Publish and Probe fail with ErrClosed afterwards
// (unavailable: the messages are not at fault). Close is idempotent and
// always returns nil.
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

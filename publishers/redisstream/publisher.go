package redisstream

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher appends outbox messages to Redis streams with go-redis: each
// Publish call is one pipeline of XADDs (and WAIT, when configured) on one
// connection. Its methods are safe for concurrent use.
type Publisher struct {
	cfg    Config
	client *redis.Client

	closed    atomic.Bool
	closeOnce sync.Once
}

// New returns a Publisher for cfg. It does not connect: the first Publish
// or Probe does. The error of an invalid cfg wraps one *ConfigError per
// invalid field, each wrapping ErrInvalidConfig.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts, err := cfg.options()
	if err != nil { // validate checked it
		return nil, err
	}
	return &Publisher{cfg: cfg, client: redis.NewClient(opts)}, nil
}

// xadd is one message bound for the pipeline: its index in the call, its
// event id, its stream and its entry.
type xadd struct {
	index  int
	id     uuid.UUID
	stream string
	entry  entry
}

// Publish appends each message to its stream (Config.StreamPrefix + Topic)
// and returns once Redis replied to every XADD (and WAIT, with
// Config.WaitReplicas), or failed.
//
// It returns nil when every message was acknowledged, a publishers.Errors
// with one entry per message when the outcome differs between messages,
// and a single error when every message failed alike (wrapping
// publishers.ErrUnavailable when Redis could not be reached). Each failure
// is classified as described in the package documentation.
//
// The XADDs are sent as one pipeline, in the order of msgs, on one
// connection: Redis runs them in that order, so the messages of one topic
// (and so of one key) land in their stream in their order in msgs. A
// message whose topic makes no valid stream key, or whose entry exceeds
// Config.MaxMessageBytes, fails permanently without being sent.
//
// When ctx ends first, Publish returns at once with an error for every
// message not acknowledged, and sends nothing more for them: no request is
// retried or started in the background. A pipeline already written to
// Redis may still be appended (its outcome is unknown); the connection
// carrying it goes back to the pool when its replies come, or is closed
// when Config.Timeout passes without them, or at Close. Until then, a
// pipeline still being written reads the keys and payloads of msgs;
// nothing else of msgs is kept.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if p.closed.Load() {
		return publishers.Unavailable(ErrClosed) // not the messages' fault: spend no attempt
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return classify(fmt.Errorf("redisstream: publish: %w", err))
	}
	results := make([]error, len(msgs))
	batch := make([]xadd, 0, len(msgs))
	values := make([]any, entryValues*len(msgs)) // one array for every entry's values
	var lastTopic, lastStream string             // batches mostly hold one topic: check it once
	for i := range msgs {
		m := &msgs[i]
		stream, err := lastStream, error(nil)
		if m.Topic != lastTopic || lastStream == "" {
			stream, err = streamKey(p.cfg.StreamPrefix, m.Topic)
			if err == nil {
				lastTopic, lastStream = m.Topic, stream
			}
		}
		if err != nil {
			results[i] = classify(fmt.Errorf("redisstream: event %s: %w", m.ID, err))
			continue
		}
		e := toEntry(m, values[entryValues*i:entryValues*(i+1):entryValues*(i+1)])
		if e.size > p.cfg.MaxMessageBytes {
			results[i] = classify(fmt.Errorf("redisstream: stream %q: event %s: entry of %d bytes exceeds MaxMessageBytes (%d): %w",
				stream, m.ID, e.size, p.cfg.MaxMessageBytes, ErrTooLarge))
			continue
		}
		batch = append(batch, xadd{index: i, id: m.ID, stream: stream, entry: e})
	}
	if len(batch) > 0 {
		var errs []error
		err := runCtx(ctx, func() { errs = p.pipeline(ctx, batch) })
		if err != nil {
			err = classify(fmt.Errorf("redisstream: publish (%d XADDs): %w; a pipeline already written may still be appended", len(batch), err))
		}
		for j, x := range batch {
			if err != nil {
				results[x.index] = err
			} else {
				results[x.index] = errs[j]
			}
		}
	}
	return summarize(results)
}

// pipeline sends the XADDs of batch, and WAIT when configured, as one
// pipeline and returns one classified error per XADD, nil for those Redis
// acknowledged.
func (p *Publisher) pipeline(ctx context.Context, batch []xadd) []error {
	pipe := p.client.Pipeline()
	cmds := make([]*redis.StringCmd, len(batch))
	for j := range batch {
		cmds[j] = pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: batch[j].stream,
			MaxLen: p.cfg.MaxLen,
			Approx: p.cfg.MaxLen > 0,
			Values: batch[j].entry.values,
		})
	}
	var wait *redis.Cmd
	if p.cfg.WaitReplicas > 0 {
		// On the same connection, after the XADDs: WAIT counts the
		// replicas that acknowledged this connection's writes.
		wait = pipe.Do(ctx, "WAIT", p.cfg.WaitReplicas, p.cfg.WaitTimeout.Milliseconds())
	}
	_, execErr := pipe.Exec(ctx)

	errs := make([]error, len(batch))
	var whole error // the shared error of the XADDs that got no reply
	for j, cmd := range cmds {
		// The entry id Redis replied with means the entry is stored, even
		// when go-redis later stamps the connection's failure on every
		// command of the pipeline.
		if cmd.Val() != "" {
			continue
		}
		err := cmd.Err()
		var rerr redis.Error
		if err != nil && errors.As(err, &rerr) { // Redis' reply to this XADD
			errs[j] = classify(fmt.Errorf("redisstream: stream %q: event %s: %w", batch[j].stream, batch[j].id, err))
			continue
		}
		if whole == nil {
			if err == nil {
				err = execErr
			}
			if err == nil {
				err = errors.New("no reply")
			}
			whole = classify(fmt.Errorf("redisstream: pipeline of %d XADDs: %w", len(batch), err))
		}
		errs[j] = whole
	}
	if wait != nil {
		if err := p.waitError(wait); err != nil {
			for j := range errs {
				if errs[j] == nil {
					errs[j] = err
				}
			}
		}
	}
	return errs
}

// waitError returns the classified error of a WAIT that failed or counted
// fewer replicas than Config.WaitReplicas, nil otherwise.
func (p *Publisher) waitError(wait *redis.Cmd) error {
	n, err := wait.Int64()
	if err == nil && n < int64(p.cfg.WaitReplicas) {
		err = fmt.Errorf("%w: WAIT %d %d counted %d replicas", ErrNotReplicated, p.cfg.WaitReplicas, p.cfg.WaitTimeout.Milliseconds(), n)
	}
	if err == nil {
		return nil
	}
	return classify(fmt.Errorf("redisstream: the XADDs were appended but not replicated as asked: %w", err))
}

// summarize turns per-message results into Publish's return value: nil
// when all succeeded, the one error when every message failed with it, the
// first error when every message failed because the sink is unavailable,
// a publishers.Errors otherwise.
func summarize(results []error) error {
	failed, unavailable, same := 0, 0, true
	for _, err := range results {
		if err != nil {
			failed++
			if errors.Is(err, publishers.ErrUnavailable) {
				unavailable++
			}
		}
		same = same && sameError(err, results[0])
	}
	switch {
	case failed == 0:
		return nil
	case same, unavailable == len(results):
		return results[0]
	default:
		return publishers.Errors(results)
	}
}

// sameError reports whether a and b are the same error value (not merely
// equal messages); false for values of types that cannot be compared.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// runCtx runs f in a goroutine and waits for it to return, or for ctx to
// end; it returns nil when f returned (its results may then be read), and
// ctx's error otherwise (f's results must then be left alone). go-redis
// bounds a call's reads and writes by its context's deadline, not by its
// cancellation: f still ends on its own, within Config.Timeout, or when
// Close closes its connection.
func runCtx(ctx context.Context, f func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // both ready: f's answer wins
			return nil
		default:
			return ctx.Err()
		}
	}
}

// Config returns the configuration in effect, defaults filled in. Its
// String and LogValue hide the passwords.
func (p *Publisher) Config() Config { return p.cfg }

// Close closes the publisher's connections, those of Publish calls in
// flight included, which then fail as unavailable; Publish and Probe fail
// with ErrClosed afterwards. It does not wait for the calls in flight.
// Close is idempotent and returns nil.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		_ = p.client.Close() // errors of closing connections change nothing for the caller
	})
	return nil
}

// String describes the publisher without secrets.
func (p *Publisher) String() string {
	return "redisstream.Publisher{" + redactedURL(p.cfg.URL) + "}"
}

package kafka

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// Publisher publishes outbox messages to Kafka with kafka-go's Client,
// synchronously and with acks=all: every produce request of a Publish call
// is made, and answered or abandoned, before the call returns. Its methods
// are safe for concurrent use.
type Publisher struct {
	cfg      Config
	sasl     sasl.Mechanism
	balancer kafkago.Balancer
	// transport pools the broker connections and caches metadata. Probe
	// drops both when the brokers answer after an outage.
	transport *kafkago.Transport

	closed    atomic.Bool
	closeOnce sync.Once
}

// New returns a Publisher for cfg. It does not connect: the first Publish
// does. The error of an invalid cfg is a *ConfigError, which wraps
// ErrInvalidConfig.
func New(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	mechanism, err := saslMechanism(cfg.SASL)
	if err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, sasl: mechanism}
	p.transport = p.newTransport()
	p.balancer = newBalancer(cfg.Partitioner)
	return p, nil
}

// saslMechanism builds kafka-go's mechanism for s. Its errors never hold
// the password.
func saslMechanism(s SASLConfig) (sasl.Mechanism, error) {
	switch s.Mechanism {
	case "":
		return nil, nil
	case SASLPlain:
		return plain.Mechanism{Username: s.Username, Password: s.Password}, nil
	}
	algo := scram.SHA256
	if s.Mechanism == SASLScramSHA512 {
		algo = scram.SHA512
	}
	m, err := scram.Mechanism(algo, s.Username, s.Password)
	if err != nil {
		// The underlying message may quote the password: drop it.
		return nil, invalid("SASL", "username or password is not valid for "+s.Mechanism+" (SASLprep)")
	}
	return m, nil
}

// Publish sends msgs and waits for the brokers to acknowledge them (acks=all).
//
// It returns nil when every message was acknowledged, a publishers.Errors
// with one entry per message when the outcome differs between messages,
// and a single error when the whole call failed alike (wrapping
// publishers.ErrUnavailable when no broker could take any message). Each
// failure is classified as described in the package documentation.
//
// Messages are grouped by topic and each topic is written on its own, so a
// missing or forbidden topic fails only its own messages. Within a topic,
// messages of the same partition are sent in their order in msgs.
//
// When ctx ends first, Publish returns at once with ctx's error for the
// messages not acknowledged, and sends nothing more for them: no request
// is retried or started in the background. A request already written to a
// broker may still be appended (its outcome is unknown). Publish does not
// keep msgs after it returns.
func (p *Publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	if p.closed.Load() {
		return publishers.Unavailable(ErrClosed) // not the messages' fault: spend no attempt
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return classify(fmt.Errorf("kafka: publish: %w", err))
	}
	// Close does not wait for this call: if it came meanwhile, drop the
	// connections this call may have opened after it.
	defer func() {
		if p.closed.Load() {
			p.transport.CloseIdleConnections()
		}
	}()

	results := make([]error, len(msgs))
	records := make([]kafkago.Message, len(msgs))
	groups := make(map[string][]int)
	var topics []string // first-seen order, for determinism
	for i := range msgs {
		m := &msgs[i]
		if err := outbox.ValidateTopic(m.Topic); err != nil {
			results[i] = publishers.Permanent(fmt.Errorf("kafka: event %s: %w", m.ID, err))
			continue
		}
		records[i] = toKafka(m)
		if size := messageSize(&records[i]); size > p.cfg.MaxMessageBytes {
			results[i] = publishers.Permanent(fmt.Errorf("kafka: topic %q: event %s: message of %d bytes exceeds MaxMessageBytes (%d): %w",
				m.Topic, m.ID, size, p.cfg.MaxMessageBytes, kafkago.MessageSizeTooLarge))
			continue
		}
		if _, ok := groups[m.Topic]; !ok {
			topics = append(topics, m.Topic)
		}
		groups[m.Topic] = append(groups[m.Topic], i)
	}

	if len(topics) == 1 {
		err := p.publishTopic(ctx, topics[0], records, groups[topics[0]], results)
		if err != nil && len(groups[topics[0]]) == len(msgs) {
			return err // one topic holding every message failed as a whole
		}
		return publishers.Summarize(results)
	}
	// Each topic's goroutine writes only the results of its own messages.
	var wg sync.WaitGroup
	for _, topic := range topics {
		wg.Go(func() { p.publishTopic(ctx, topic, records, groups[topic], results) })
	}
	wg.Wait()
	return publishers.Summarize(results)
}

// publishTopic writes the messages records[i] for i in idxs, all of one
// topic, and sets results[i]. It returns the error shared by all of them
// when the write failed as a whole, nil otherwise.
func (p *Publisher) publishTopic(ctx context.Context, topic string, records []kafkago.Message, idxs []int, results []error) error {
	batch := make([]kafkago.Message, len(idxs))
	for j, i := range idxs {
		batch[j] = records[i]
	}
	errs, whole := p.produce(ctx, topic, batch)
	if whole != nil {
		whole = p.confirmUnknownTopicWhole(ctx, topic, whole)
	} else {
		p.confirmUnknownTopic(ctx, topic, errs)
		p.isolate(ctx, batch, errs)
		whole = sameError(errs)
	}
	if whole != nil {
		whole = classify(fmt.Errorf("kafka: topic %q: %w", topic, whole))
		for _, i := range idxs {
			results[i] = whole
		}
		return whole
	}
	for j, i := range idxs {
		if errs[j] != nil {
			results[i] = classify(fmt.Errorf("kafka: topic %q: event %s: %w", topic, eventID(&batch[j]), errs[j]))
		}
	}
	return nil
}

// sameError returns the error shared by every entry of errs (all from one
// failed batch), or nil when they differ or one is nil.
func sameError(errs []error) error {
	first := errs[0]
	if first == nil || !reflect.TypeOf(first).Comparable() {
		return nil
	}
	for _, err := range errs[1:] {
		if err != first { // no panic: first's dynamic type is comparable
			return nil
		}
	}
	return first
}

// isolate re-sends the messages whose batch the broker rejected for its
// content (isRecordLevel): the broker rejects a batch whole, so the
// messages sharing it with the culprit got the same error. They are sent
// again, in halves, until each failure is known to belong to a message sent
// alone. It updates errs in place.
func (p *Publisher) isolate(ctx context.Context, batch []kafkago.Message, errs []error) {
	var suspects []int
	for j, err := range errs {
		if isRecordLevel(err) {
			suspects = append(suspects, j)
		}
	}
	if len(suspects) == 0 {
		return
	}
	p.bisect(ctx, batch, suspects, errs)
}

func (p *Publisher) bisect(ctx context.Context, batch []kafkago.Message, set []int, errs []error) {
	if err := ctx.Err(); err != nil {
		for _, j := range set {
			// Not wrapped: the rejection is not known to be this message's.
			errs[j] = fmt.Errorf("batch rejected (%v), and the context ended before the rejected message was found: %w", errs[j], err)
		}
		return
	}
	msgs := make([]kafkago.Message, len(set))
	for k, j := range set {
		msgs[k] = batch[j]
	}
	res, whole := p.produce(ctx, msgs[0].Topic, msgs)
	var again []int
	for k, j := range set {
		if whole != nil {
			errs[j] = whole
		} else {
			errs[j] = res[k]
		}
		if isRecordLevel(errs[j]) {
			again = append(again, j)
		}
	}
	// A message that failed alone, or as the only failure of a sent set
	// (the others were in other batches), is the culprit.
	if len(set) == 1 || len(again) <= 1 {
		return
	}
	half := len(again) / 2
	p.bisect(ctx, batch, again[:half], errs)
	// The second half goes only if every message of the first was
	// acknowledged or found at fault itself: a message that failed for
	// another reason will be sent again, and what is behind it must not
	// overtake it (KeyBatches).
	for _, j := range again[:half] {
		if err := errs[j]; err != nil && !isRecordLevel(err) {
			for _, k := range again[half:] {
				errs[k] = fmt.Errorf("kafka: not sent: an earlier message of its batch failed (%w)", err)
			}
			return
		}
	}
	p.bisect(ctx, batch, again[half:], errs)
}

// KeyBatches reports that the publisher takes several events of one key
// in one call (publishers.KeyBatcher): one key's messages go to one partition,
// whose requests are sent one after the other, and none is sent after one
// that failed other than for its own content (a message the broker
// refuses for good, which the relay fails, does not hold back the ones
// behind it). A request written when the call's context ended may still
// be appended, but nothing is sent after it.
func (p *Publisher) KeyBatches() bool { return true }

// confirmUnknownTopic checks with the brokers whether a topic reported
// unknown really is. kafka-go answers from metadata it caches for up to
// 6 s, so a topic created since is reported unknown though it exists:
// such errors become transient instead of permanent.
func (p *Publisher) confirmUnknownTopic(ctx context.Context, topic string, errs []error) {
	var unknown error
	for _, err := range errs {
		if errors.Is(err, kafkago.UnknownTopicOrPartition) {
			unknown = err
			break
		}
	}
	if unknown == nil {
		return
	}
	replacement := p.confirmUnknownTopicWhole(ctx, topic, unknown)
	if replacement == unknown {
		return
	}
	for j, err := range errs {
		if errors.Is(err, kafkago.UnknownTopicOrPartition) {
			errs[j] = replacement
		}
	}
}

// confirmUnknownTopicWhole returns err unchanged unless err says topic is
// unknown and the brokers disagree or cannot be asked.
func (p *Publisher) confirmUnknownTopicWhole(ctx context.Context, topic string, err error) error {
	if !errors.Is(err, kafkago.UnknownTopicOrPartition) {
		return err
	}
	exists, lookupErr := p.topicExists(ctx, topic)
	switch {
	case lookupErr != nil:
		// %v, not %w: the unknown-topic error must not make this permanent.
		return fmt.Errorf("reported unknown (%v), and confirming it failed: %w", err, lookupErr)
	case exists:
		return fmt.Errorf("reported unknown (%v) by stale client metadata, but the topic exists; retry later", err)
	default:
		return err
	}
}

// newTransport returns a transport with no connections and no metadata.
func (p *Publisher) newTransport() *kafkago.Transport {
	return &kafkago.Transport{
		DialTimeout: p.cfg.DialTimeout,
		ClientID:    p.cfg.ClientID,
		TLS:         p.cfg.TLS,
		SASL:        p.sasl,
	}
}

// topicExists asks the brokers for topic's metadata over a new connection,
// bypassing the metadata cached by the publisher's transport.
func (p *Publisher) topicExists(ctx context.Context, topic string) (bool, error) {
	transport := p.newTransport()
	transport.MetadataTopics = []string{topic}
	defer transport.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(p.cfg.Brokers...), Transport: transport, Timeout: p.cfg.WriteTimeout}
	res, err := client.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return false, err
	}
	for _, t := range res.Topics {
		if t.Name != topic {
			continue
		}
		switch {
		case t.Error == nil:
			return true, nil
		case errors.Is(t.Error, kafkago.UnknownTopicOrPartition):
			return false, nil
		default:
			return false, t.Error
		}
	}
	return false, nil
}

// Config returns the configuration in effect, defaults filled in. Its
// String and LogValue hide the SASL password.
func (p *Publisher) Config() Config { return p.cfg }

// Close closes the publisher's idle broker connections; Publish fails with
// ErrClosed afterwards. It does not wait for Publish calls in flight: they
// end with their context. Close is idempotent and returns nil.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		p.transport.CloseIdleConnections()
	})
	return nil
}

// String describes the publisher without secrets.
func (p *Publisher) String() string {
	return "kafka.Publisher{" + strings.Join(p.cfg.Brokers, ",") + "}"
}

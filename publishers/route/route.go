// Package route sends each message to one of several sinks by its topic.
// A Rule maps a topic pattern to a sink and a destination template; the
// first rule whose pattern matches a message's topic takes it, and the
// message reaches that sink with its topic replaced by the destination
// (the template with {topic} filled in). A message no rule matches fails
// permanently with a reason: it is never dropped silently.
package route

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
)

// Rule sends the messages whose topic matches Pattern to the sink named
// Sink, at Destination.
type Rule struct {
	// Pattern is a topic, or a pattern in which each * stands for any run
	// of characters, dots included: "orders.*" matches "orders.created";
	// "*" matches every topic.
	Pattern string
	// Sink names the sink (kafka, nats, ...).
	Sink string
	// Destination is where the sink delivers the message, in the sink's
	// terms (a Kafka topic, a NATS subject, a webhook URL, ...), with
	// {topic} standing for the message's topic. Empty means "{topic}".
	Destination string
	// CloudEvents is how the rule's messages travel as CloudEvents
	// (publishers/cloudevents): binary, structured or off; empty means
	// as New's events say for the sink.
	CloudEvents cloudevents.Mode
}

// ParseRule parses "PATTERN=SINK" or "PATTERN=SINK:DESTINATION", e.g.
// "orders.*=kafka:orders" or "*=nats:events.{topic}". The destination is
// everything after the first colon, so it may hold colons itself (a URL).
// The sink may be followed by "+cloudevents=MODE" (binary, structured or
// off): "orders.*=kafka+cloudevents=binary:orders".
func ParseRule(s string) (Rule, error) {
	pattern, target, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return Rule{}, fmt.Errorf("route %q: want PATTERN=SINK or PATTERN=SINK:DESTINATION", s)
	}
	sink, dest, _ := strings.Cut(target, ":")
	sink, option, hasOption := strings.Cut(sink, "+")
	r := Rule{Pattern: strings.TrimSpace(pattern), Sink: strings.TrimSpace(sink), Destination: strings.TrimSpace(dest)}
	if hasOption {
		mode, ok := strings.CutPrefix(strings.TrimSpace(option), ceOption)
		m, err := cloudevents.ParseMode(mode)
		if !ok || err != nil || m == "" {
			return Rule{}, fmt.Errorf("route %q: after the sink, want +%sbinary, +%sstructured or +%soff", s, ceOption, ceOption, ceOption)
		}
		r.CloudEvents = m
	}
	return r, r.validate()
}

// ceOption starts a rule's CloudEvents mode, after its sink and a '+'.
const ceOption = "cloudevents="

// validate reports a rule that cannot match or has no sink.
func (r Rule) validate() error {
	if r.Pattern == "" || r.Sink == "" {
		return fmt.Errorf("route %s: the pattern and the sink must not be empty", r)
	}
	if err := outbox.ValidateTopic(strings.ReplaceAll(r.Pattern, "*", "x")); err != nil {
		return fmt.Errorf("route %s: the pattern matches no valid topic: %w", r, err)
	}
	if strings.Count(r.Destination, "{") != strings.Count(r.Destination, "{topic}") {
		return fmt.Errorf("route %s: the destination may hold {topic} and no other {...}", r)
	}
	return nil
}

// String returns the rule in the form ParseRule reads.
func (r Rule) String() string {
	s := r.Pattern + "=" + r.Sink
	if r.CloudEvents != "" {
		s += "+" + ceOption + string(r.CloudEvents)
	}
	if r.Destination != "" {
		s += ":" + r.Destination
	}
	return s
}

// Matches reports whether topic matches the rule's pattern.
func (r Rule) Matches(topic string) bool { return match(r.Pattern, topic) }

// Overlaps reports whether some topic matches both the rule's pattern and
// pattern, a topic or a pattern with * as in Rule.Pattern.
func (r Rule) Overlaps(pattern string) bool { return overlap(r.Pattern, pattern) }

// DestinationFor returns where the rule sends a message of topic.
func (r Rule) DestinationFor(topic string) string {
	if r.Destination == "" {
		return topic
	}
	return strings.ReplaceAll(r.Destination, "{topic}", topic)
}

// match reports whether s matches pattern, where * stands for any run of
// characters.
func match(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// overlap reports whether some string matches both patterns a and b, in
// time proportional to len(a) * len(b).
func overlap(a, b string) bool {
	// f[i][j] reports whether some string matches both a[i:] and b[j:].
	f := make([][]bool, len(a)+1)
	for i := range f {
		f[i] = make([]bool, len(b)+1)
	}
	for i := len(a); i >= 0; i-- {
		for j := len(b); j >= 0; j-- {
			switch {
			case i == len(a) && j == len(b):
				f[i][j] = true
			case i < len(a) && a[i] == '*': // a's * matches nothing, or b[j] too
				f[i][j] = f[i+1][j] || j < len(b) && f[i][j+1]
			case j < len(b) && b[j] == '*':
				f[i][j] = f[i][j+1] || i < len(a) && f[i+1][j]
			case i < len(a) && j < len(b):
				f[i][j] = a[i] == b[j] && f[i+1][j+1]
			}
		}
	}
	return f[0][0]
}

// events returns how the rule's messages travel as CloudEvents, from the
// sink's configuration in events and the rule's mode.
func (r Rule) events(events map[string]cloudevents.Config) cloudevents.Config {
	c := events[r.Sink]
	if r.CloudEvents != "" {
		c.Mode = r.CloudEvents
	}
	return c
}

// Find returns the first of rules whose pattern matches topic.
func Find(rules []Rule, topic string) (Rule, bool) {
	for _, r := range rules {
		if r.Matches(topic) {
			return r, true
		}
	}
	return Rule{}, false
}

// Sink is what the router needs of a sink: publishers.Publisher.
type Sink interface {
	Publish(ctx context.Context, msgs []outbox.Message) error
	Close() error
}

// prober is a sink that can be probed (publishers.Prober).
type prober interface {
	Probe(ctx context.Context) error
}

// keyBatcher is a sink that may take several events of one key in one
// call (publishers.KeyBatcher).
type keyBatcher interface {
	KeyBatches() bool
}

// ErrNoRoute fails a message whose topic no rule matches.
var ErrNoRoute = errors.New("no route for the topic")

// Router publishes each message to the sink its rule names. It is a
// publishers.Publisher; when every sink can be probed it is also a
// publishers.Prober (see New).
type Router struct {
	rules  []Rule
	sinks  map[string]Sink
	events map[string]cloudevents.Config
}

// New returns a router over sinks, by name, with rules tried in order.
// Every sink a rule names must be in sinks. events, by sink name (nil for
// none), says how each sink's messages travel as CloudEvents: a rule's
// CloudEvents mode, when set, takes the place of the sink's Mode. A
// message is converted before its topic becomes its destination, so its
// type attribute is its own topic. The result implements
// publishers.Prober when every sink does: its Probe succeeds when any sink
// answers, so that one sink's outage does not hold back the others (their
// messages keep flowing; the dead sink's are retried until it is back).
func New(rules []Rule, sinks map[string]Sink, events map[string]cloudevents.Config) (Sink, error) {
	if len(rules) == 0 {
		return nil, errors.New("route: no rules")
	}
	for _, r := range rules {
		if err := r.validate(); err != nil {
			return nil, err
		}
		if sinks[r.Sink] == nil {
			return nil, fmt.Errorf("route %s: no sink named %q", r, r.Sink)
		}
		if err := r.events(events).Check(); err != nil {
			return nil, fmt.Errorf("route %s: %w", r, err)
		}
	}
	rt := &Router{rules: rules, sinks: sinks, events: events}
	for _, s := range sinks {
		if _, ok := s.(prober); !ok {
			return rt, nil
		}
	}
	return &probingRouter{rt}, nil
}

// Publish sends each message to its rule's sink, under its destination,
// every sink's share at once; a message's result is its sink's. One key's
// messages share a topic, hence a sink, and keep their order.
func (rt *Router) Publish(ctx context.Context, msgs []outbox.Message) error {
	results := make([]error, len(msgs))
	type share struct {
		msgs  []outbox.Message
		index []int // into msgs
	}
	shares := map[string]*share{}
	for i, m := range msgs {
		r, ok := Find(rt.rules, m.Topic)
		if !ok {
			results[i] = publishers.Permanent(fmt.Errorf("%w %q: add a --route rule for it (or a catch-all \"*=SINK\")", ErrNoRoute, m.Topic))
			continue
		}
		sh := shares[r.Sink]
		if sh == nil {
			sh = &share{}
			shares[r.Sink] = sh
		}
		m, err := r.events(rt.events).Convert(m)
		if err != nil {
			results[i] = publishers.Permanent(err)
			continue
		}
		m.Topic = r.DestinationFor(m.Topic)
		sh.msgs, sh.index = append(sh.msgs, m), append(sh.index, i)
	}
	var wg sync.WaitGroup
	for name, sh := range shares {
		wg.Go(func() {
			errs := publishers.PerMessage(rt.sinks[name].Publish(ctx, sh.msgs), len(sh.msgs))
			for j, err := range errs {
				results[sh.index[j]] = err
			}
		})
	}
	wg.Wait()
	for _, err := range results {
		if err != nil {
			return publishers.Errors(results)
		}
	}
	return nil
}

// KeyBatches reports whether every sink takes several events of one key
// in one call (publishers.KeyBatcher). One key's messages share a topic, hence
// a sink, so each sink's promise covers them; a router over several sinks
// can only promise what all of them do.
func (rt *Router) KeyBatches() bool {
	for _, s := range rt.sinks {
		if kb, ok := s.(keyBatcher); !ok || !kb.KeyBatches() {
			return false
		}
	}
	return true
}

// Close closes every sink at once and returns their errors joined.
func (rt *Router) Close() error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for name, s := range rt.sinks {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("close %s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// probingRouter is a Router whose sinks can all be probed.
type probingRouter struct{ *Router }

// Probe probes every sink at once and returns nil as soon as one answers,
// or, when none does, the first sink's error.
func (rt *probingRouter) Probe(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(rt.sinks))
	for _, s := range rt.sinks {
		go func() { errc <- s.(prober).Probe(ctx) }()
	}
	var first error
	for range rt.sinks {
		err := <-errc
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

package route

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
)

func TestParseRule(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Rule
		err  string
	}{
		{"orders.*=kafka:orders", Rule{"orders.*", "kafka", "orders", ""}, ""},
		{"*=nats:events.{topic}", Rule{"*", "nats", "events.{topic}", ""}, ""},
		{"billing.*=webhook:https://hooks.example.com/in/{topic}", Rule{"billing.*", "webhook", "https://hooks.example.com/in/{topic}", ""}, ""},
		{" audit = stdout ", Rule{"audit", "stdout", "", ""}, ""},
		{"orders.*", Rule{}, "want PATTERN=SINK"},
		{"=kafka", Rule{}, "must not be empty"},
		{"orders=", Rule{}, "must not be empty"},
		{"orders/x=kafka", Rule{}, "matches no valid topic"},
		{"orders=kafka:{key}", Rule{}, "no other {...}"},
		{"orders.*=kafka+cloudevents=binary:orders", Rule{"orders.*", "kafka", "orders", cloudevents.ModeBinary}, ""},
		{"*=webhook+cloudevents=structured:https://h.example/{topic}", Rule{"*", "webhook", "https://h.example/{topic}", cloudevents.ModeStructured}, ""},
		{"audit=stdout+cloudevents=off", Rule{"audit", "stdout", "", cloudevents.ModeOff}, ""},
		{"orders=kafka+binary", Rule{}, "+cloudevents=binary"},
		{"orders=kafka+cloudevents=json", Rule{}, "+cloudevents=structured"},
	} {
		got, err := ParseRule(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseRule(%q) error = %v; want one saying %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseRule(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if again, err := ParseRule(got.String()); err != nil || again != got {
			t.Errorf("ParseRule(%q.String()) = %+v, %v", c.in, again, err)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, topic string
		want           bool
	}{
		{"*", "anything.at.all", true},
		{"orders", "orders", true},
		{"orders", "orders.created", false},
		{"orders.*", "orders.created", true},
		{"orders.*", "orders.", true},
		{"orders.*", "orders", false},
		{"orders.*", "billing.orders.x", false},
		{"*.created", "orders.created", true},
		{"*.created", "orders.created.v2", false},
		{"a*b*c", "a-x-b-y-c", true},
		{"a*b*c", "a-c-b", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
	} {
		if got := match(c.pattern, c.topic); got != c.want {
			t.Errorf("match(%q, %q) = %v, want %v", c.pattern, c.topic, got, c.want)
		}
	}
}

// Overlaps holds when some topic matches both patterns. Beside the cases,
// every pair of short patterns over "a", "b" and "*" is checked against
// match on every string of up to 6 of "a" and "b".
func TestOverlaps(t *testing.T) {
	for _, c := range []struct {
		rule, pattern string
		want          bool
	}{
		{"orders.*", "orders.*", true},
		{"orders.*", "orders.created", true},
		{"orders.created", "orders.*", true},
		{"orders.*", "*.created", true},
		{"*", "billing.*", true},
		{"orders.*", "billing.*", false},
		{"orders.*", "orders", false},
		{"a*b", "b*a", false},
		{"*a", "*b", false},
		{"a*", "*b", true},
	} {
		if got := (Rule{Pattern: c.rule}).Overlaps(c.pattern); got != c.want {
			t.Errorf("rule %q overlaps %q = %v, want %v", c.rule, c.pattern, got, c.want)
		}
	}
	words := func(alphabet string, n int) []string {
		out := []string{""}
		for prev := out; n > 0; n-- {
			var next []string
			for _, w := range prev {
				for _, c := range alphabet {
					next = append(next, w+string(c))
				}
			}
			out, prev = append(out, next...), next
		}
		return out
	}
	patterns, topics := words("ab*", 4), words("ab", 6)
	for _, a := range patterns {
		for _, b := range patterns {
			want := false
			for _, s := range topics {
				if match(a, s) && match(b, s) {
					want = true
					break
				}
			}
			if got := overlap(a, b); got != want {
				t.Fatalf("overlap(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
	}
}

// memSink records what it was given, and fails the topics in fail.
type memSink struct {
	mu     sync.Mutex
	got    []outbox.Message
	fail   map[string]error
	probe  error
	closed bool
}

func (s *memSink) Publish(_ context.Context, msgs []outbox.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make(publishers.Errors, len(msgs))
	failed := false
	for i, m := range msgs {
		if err := s.fail[m.Topic]; err != nil {
			errs[i], failed = err, true
			continue
		}
		s.got = append(s.got, m)
	}
	if failed {
		return errs
	}
	return nil
}

func (s *memSink) Close() error { s.closed = true; return nil }

type probingSink struct{ *memSink }

func (s probingSink) Probe(context.Context) error { return s.probe }

func msg(topic, key string) outbox.Message {
	return outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: topic, Key: []byte(key), Payload: []byte(topic + "/" + key)}
}

// The first matching rule takes a message; its topic becomes the rule's
// destination; per-message results come back in the caller's order; a
// topic no rule matches fails permanently, and nothing else does.
func TestRouterPublish(t *testing.T) {
	kafka, nats := &memSink{}, &memSink{fail: map[string]error{"events.down": publishers.Unavailable(errors.New("no connection"))}}
	rt, err := New([]Rule{
		{Pattern: "orders.*", Sink: "kafka", Destination: "orders"},
		{Pattern: "orders.*", Sink: "nats"}, // shadowed
		{Pattern: "billing.*", Sink: "nats", Destination: "events.{topic}"},
		{Pattern: "down", Sink: "nats", Destination: "events.down"},
	}, map[string]Sink{"kafka": kafka, "nats": nats}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := []outbox.Message{msg("orders.created", "a"), msg("audit", "x"), msg("billing.paid", "b"), msg("orders.paid", "a"), msg("down", "c")}
	err = rt.Publish(context.Background(), in)
	res := publishers.PerMessage(err, len(in))
	if res[0] != nil || res[2] != nil || res[3] != nil {
		t.Errorf("routed messages failed: %v", res)
	}
	if !publishers.IsPermanent(res[1]) || !errors.Is(res[1], ErrNoRoute) || !strings.Contains(res[1].Error(), `"audit"`) {
		t.Errorf("unrouted message: %v; want a permanent ErrNoRoute naming the topic", res[1])
	}
	if !errors.Is(res[4], publishers.ErrUnavailable) {
		t.Errorf("a sink's own error: %v; want it passed through", res[4])
	}
	if got := payloads(kafka.got); !slices.Equal(got, []string{"orders:orders.created/a", "orders:orders.paid/a"}) {
		t.Errorf("kafka got %v", got)
	}
	if got := payloads(nats.got); !slices.Equal(got, []string{"events.billing.paid:billing.paid/b"}) {
		t.Errorf("nats got %v", got)
	}
	if in[0].Topic != "orders.created" {
		t.Error("Publish changed the caller's message")
	}
	if err := rt.Publish(context.Background(), []outbox.Message{msg("orders.x", "k")}); err != nil {
		t.Errorf("a batch that all went through: %v", err)
	}
	if err := rt.Close(); err != nil || !kafka.closed || !nats.closed {
		t.Errorf("Close = %v; closed kafka %v, nats %v", err, kafka.closed, nats.closed)
	}
}

func payloads(msgs []outbox.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Topic+":"+string(m.Payload))
	}
	return out
}

func TestNewRefusesRulesWithoutSinks(t *testing.T) {
	if _, err := New(nil, map[string]Sink{"kafka": &memSink{}}, nil); err == nil {
		t.Error("New with no rules succeeded")
	}
	if _, err := New([]Rule{{Pattern: "*", Sink: "nats"}}, map[string]Sink{"kafka": &memSink{}}, nil); err == nil || !strings.Contains(err.Error(), `no sink named "nats"`) {
		t.Errorf("New with a rule naming a missing sink: %v", err)
	}
}

// The router can be probed when every sink can, and answers when any of
// them does.
func TestRouterProbe(t *testing.T) {
	down := publishers.Unavailable(errors.New("refused"))
	up, dead := probingSink{&memSink{}}, probingSink{&memSink{probe: down}}
	rules := []Rule{{Pattern: "a", Sink: "up"}, {Pattern: "b", Sink: "dead"}}
	rt, err := New(rules, map[string]Sink{"up": up, "dead": dead}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := rt.(prober)
	if !ok {
		t.Fatal("a router whose sinks can all be probed is no prober")
	}
	if err := p.Probe(context.Background()); err != nil {
		t.Errorf("Probe with one sink up = %v; want nil", err)
	}
	rt, _ = New(rules, map[string]Sink{"up": dead, "dead": dead}, nil)
	if err := rt.(prober).Probe(context.Background()); !errors.Is(err, publishers.ErrUnavailable) {
		t.Errorf("Probe with every sink down = %v; want unavailable", err)
	}
	rt, _ = New(rules, map[string]Sink{"up": up, "dead": &memSink{}}, nil)
	if _, ok := rt.(prober); ok {
		t.Error("a router with a sink that cannot be probed claims to be a prober")
	}
}

// keyBatchingSink is a sink that answers publishers.KeyBatcher.
type keyBatchingSink struct {
	*memSink
	answer bool
}

func (s keyBatchingSink) KeyBatches() bool { return s.answer }

// A router takes a key's run in one call only when every sink does: a
// key's messages share a topic, hence a sink.
func TestRouterKeyBatches(t *testing.T) {
	rules := []Rule{{Pattern: "a", Sink: "one"}, {Pattern: "b", Sink: "two"}}
	yes, no := keyBatchingSink{&memSink{}, true}, keyBatchingSink{&memSink{}, false}
	for _, tc := range []struct {
		name     string
		one, two Sink
		want     bool
	}{
		{"both", yes, yes, true},
		{"one answering false", yes, no, false},
		{"one without KeyBatcher", yes, &memSink{}, false},
	} {
		rt, err := New(rules, map[string]Sink{"one": tc.one, "two": tc.two}, nil)
		if err != nil {
			t.Fatal(err)
		}
		kb, ok := rt.(keyBatcher)
		if got := ok && kb.KeyBatches(); got != tc.want {
			t.Errorf("%s: router answers %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A rule's CloudEvents mode takes the place of its sink's; the type is the
// event's own topic, not its destination; a message whose headers ask for
// an invalid event fails permanently; binary mode on a sink that cannot
// carry it is refused.
func TestRouterCloudEvents(t *testing.T) {
	kafka, nats := &memSink{}, &memSink{}
	events := map[string]cloudevents.Config{
		"kafka": {Mode: cloudevents.ModeBinary, Binding: cloudevents.Kafka},
		"nats":  {Binding: cloudevents.NATS},
	}
	rt, err := New([]Rule{
		{Pattern: "orders.*", Sink: "kafka", Destination: "orders"},
		{Pattern: "plain", Sink: "kafka", CloudEvents: cloudevents.ModeOff},
		{Pattern: "*", Sink: "nats", Destination: "events", CloudEvents: cloudevents.ModeStructured},
	}, map[string]Sink{"kafka": kafka, "nats": nats}, events)
	if err != nil {
		t.Fatal(err)
	}
	bad := msg("audit", "c")
	bad.Headers = map[string]string{"ce-id": "mine"}
	in := []outbox.Message{msg("orders.created", "a"), msg("plain", "b"), msg("billing.paid", "c"), bad}
	res := publishers.PerMessage(rt.Publish(context.Background(), in), len(in))
	if res[0] != nil || res[1] != nil || res[2] != nil || !publishers.IsPermanent(res[3]) {
		t.Fatalf("results %v", res)
	}
	if h := kafka.got[0].Headers; h["ce_type"] != "orders.created" || kafka.got[0].Topic != "orders" {
		t.Errorf("binary: %s headers %v", kafka.got[0].Topic, h)
	}
	if kafka.got[1].Headers["ce_type"] != "" {
		t.Errorf("+cloudevents=off converted: %v", kafka.got[1].Headers)
	}
	if p := string(nats.got[0].Payload); !strings.Contains(p, `"type":"billing.paid"`) || nats.got[0].Headers["content-type"] != cloudevents.ContentTypeStructured {
		t.Errorf("structured: %s %v", p, nats.got[0].Headers)
	}
	_, err = New([]Rule{{Pattern: "*", Sink: "kinesis", CloudEvents: cloudevents.ModeBinary}},
		map[string]Sink{"kinesis": &memSink{}}, map[string]cloudevents.Config{"kinesis": {Binding: cloudevents.Kinesis}})
	if err == nil || !strings.Contains(err.Error(), "use structured") {
		t.Errorf("binary on kinesis: %v", err)
	}
}

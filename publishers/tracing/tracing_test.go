package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/tracing"
)

// sink records what it was given and returns result.
type sink struct {
	got    []outbox.Message
	result error
	closed bool
}

func (s *sink) Publish(_ context.Context, msgs []outbox.Message) error {
	s.got = append(s.got, msgs...)
	return s.result
}

func (s *sink) Close() error { s.closed = true; return nil }

// probingSink is a sink that can be probed.
type probingSink struct {
	sink
	probes int
}

func (s *probingSink) Probe(context.Context) error { s.probes++; return errors.New("down") }

// setup returns a tracer provider whose ended spans the recorder keeps.
func setup(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func wrap(t *testing.T, s tracing.Sink, system string, tp trace.TracerProvider) tracing.Sink {
	t.Helper()
	w, err := tracing.Wrap(s, tracing.Config{System: system, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// writerContext returns the headers outbox.Write stores for a span of tp,
// and that span's context.
func writerContext(t *testing.T, tp trace.TracerProvider) (map[string]string, trace.SpanContext) {
	t.Helper()
	ctx, span := tp.Tracer("app").Start(context.Background(), "POST /orders")
	defer span.End()
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext().WithTraceState(ts)
	h := map[string]string{"content-type": "application/json"}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(ctx, sc), propagation.MapCarrier(h))
	return h, sc
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// producerSpans returns the ended spans of the wrapper.
func producerSpans(rec *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.InstrumentationScope().Name == tracing.ScopeName {
			out = append(out, s)
		}
	}
	return out
}

// consumerContext is what a consumer does with a received message's
// headers.
func consumerContext(h map[string]string) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(h))
	return trace.SpanContextFromContext(ctx)
}

// A message whose headers carry the writer's context gets a PRODUCER span
// in the writer's trace, child of the writer's span, with the messaging
// attributes; the sink receives headers that carry that span, so the
// consumer is its child; the relay's messages are not modified.
func TestSpanParentedToStoredContext(t *testing.T) {
	tp, rec := setup(t)
	stored, writer := writerContext(t, tp)
	before := maps.Clone(stored)
	inner := &sink{}
	pub := wrap(t, inner, "kafka", tp)
	msgs := []outbox.Message{{ID: uuid.New(), Topic: "orders", Key: []byte("order-7"), Payload: []byte("{}"), Headers: stored, Attempt: 2}}

	if err := pub.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	spans := producerSpans(rec)
	if len(spans) != 1 {
		t.Fatalf("%d producer spans ended, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "send orders" || s.SpanKind() != trace.SpanKindProducer {
		t.Errorf("span %q of kind %v, want \"send orders\", producer", s.Name(), s.SpanKind())
	}
	if s.SpanContext().TraceID() != writer.TraceID() || s.Parent().SpanID() != writer.SpanID() || !s.Parent().IsRemote() {
		t.Errorf("span in trace %v with parent %v, want the writer's trace %v and span %v", s.SpanContext().TraceID(), s.Parent().SpanID(), writer.TraceID(), writer.SpanID())
	}
	a := attrs(s)
	want := map[attribute.Key]string{
		"messaging.system":            "kafka",
		"messaging.operation.name":    "send",
		"messaging.operation.type":    "send",
		"messaging.destination.name":  "orders",
		"messaging.message.id":        msgs[0].ID.String(),
		"messaging.kafka.message.key": "order-7",
	}
	for k, v := range want {
		if a[k].AsString() != v {
			t.Errorf("attribute %s = %q, want %q", k, a[k].AsString(), v)
		}
	}
	if a["messaging.message.body.size"].AsInt64() != 2 || a[tracing.AttrAttempt].AsInt64() != 2 {
		t.Errorf("body size %v, attempt %v; want 2 and 2", a["messaging.message.body.size"], a[tracing.AttrAttempt])
	}
	if s.Status().Code != codes.Unset {
		t.Errorf("status %v of an acknowledged message, want unset", s.Status())
	}

	if len(inner.got) != 1 {
		t.Fatalf("sink got %d messages", len(inner.got))
	}
	got := inner.got[0].Headers
	consumer := consumerContext(got)
	if consumer.TraceID() != writer.TraceID() || consumer.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("consumer's parent %v/%v, want the producer span %v/%v", consumer.TraceID(), consumer.SpanID(), writer.TraceID(), s.SpanContext().SpanID())
	}
	if got["tracestate"] != "vendor=abc" || got["content-type"] != "application/json" {
		t.Errorf("published headers %v: want the tracestate and the message's own headers kept", got)
	}
	if !maps.Equal(msgs[0].Headers, before) {
		t.Errorf("the relay's message headers changed to %v, want %v", msgs[0].Headers, before)
	}
}

// A message without a stored context (or with one that does not parse)
// starts a new root trace, even when the Publish ctx holds a span, and the
// consumer still gets the relay's span as parent.
func TestSpanWithoutStoredContextIsRoot(t *testing.T) {
	tp, rec := setup(t)
	ctx, outer := tp.Tracer("relay").Start(context.Background(), "batch")
	defer outer.End()
	inner := &sink{}
	pub := wrap(t, inner, "nats", tp)
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: "a"},
		{ID: uuid.New(), Topic: "b", Key: []byte("k"), Headers: map[string]string{"traceparent": "garbage"}},
	}
	if err := pub.Publish(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	spans := producerSpans(rec)
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want 2", len(spans))
	}
	for i, s := range spans {
		if s.Parent().IsValid() || s.SpanContext().TraceID() == outer.SpanContext().TraceID() {
			t.Errorf("span %d has parent %v in trace %v: want a new root trace", i, s.Parent(), s.SpanContext().TraceID())
		}
		if _, ok := attrs(s)["messaging.kafka.message.key"]; ok {
			t.Errorf("span %d of a nats sink has a Kafka key", i)
		}
		if c := consumerContext(inner.got[i].Headers); c.SpanID() != s.SpanContext().SpanID() {
			t.Errorf("message %d carries span %v, want %v", i, c.SpanID(), s.SpanContext().SpanID())
		}
	}
	if msgs[0].Headers != nil || msgs[1].Headers["traceparent"] != "garbage" {
		t.Errorf("the relay's messages changed: %v, %v", msgs[0].Headers, msgs[1].Headers)
	}
}

// Each span ends with its own message's result: per message for an
// Errors, the same for all for a whole-batch error, classified in
// error.type.
func TestSpanStatusPerMessage(t *testing.T) {
	msgs := func() []outbox.Message {
		return []outbox.Message{{ID: uuid.New(), Topic: "t"}, {ID: uuid.New(), Topic: "t"}, {ID: uuid.New(), Topic: "t"}}
	}
	for _, tc := range []struct {
		name   string
		result error
		want   []string // error.type per message, "" for acknowledged
	}{
		{"all acknowledged", nil, []string{"", "", ""}},
		{"per message", publishers.Errors{nil, publishers.Permanent(errors.New("too large")), errors.New("timeout")},
			[]string{"", publishers.ClassPermanent.String(), publishers.ClassTransient.String()}},
		{"whole batch", publishers.Unavailable(errors.New("connection refused")),
			[]string{publishers.ClassUnavailable.String(), publishers.ClassUnavailable.String(), publishers.ClassUnavailable.String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := setup(t)
			pub := wrap(t, &sink{result: tc.result}, "webhook", tp)
			in := msgs()
			if err := pub.Publish(context.Background(), in); !errors.Is(err, tc.result) && fmt.Sprint(err) != fmt.Sprint(tc.result) {
				t.Fatalf("Publish = %v, want the sink's %v", err, tc.result)
			}
			spans := rec.Ended()
			if len(spans) != len(in) {
				t.Fatalf("%d spans, want %d", len(spans), len(in))
			}
			byID := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range spans {
				byID[attrs(s)["messaging.message.id"].AsString()] = s
			}
			for i, m := range in {
				s := byID[m.ID.String()]
				if s == nil {
					t.Fatalf("no span for message %d", i)
				}
				gotType := attrs(s)["error.type"].AsString()
				wantCode := codes.Unset
				if tc.want[i] != "" {
					wantCode = codes.Error
				}
				if gotType != tc.want[i] || s.Status().Code != wantCode {
					t.Errorf("message %d: error.type %q status %v, want %q %v", i, gotType, s.Status(), tc.want[i], wantCode)
				}
				if wantCode == codes.Error && s.Status().Description == "" {
					t.Errorf("message %d: error status without a description", i)
				}
			}
		})
	}
}

// The wrapper is a publishers.Prober exactly when the sink is, and forwards
// Probe and Close.
func TestOptionalInterfaces(t *testing.T) {
	tp, _ := setup(t)
	type probe interface{ Probe(context.Context) error }
	plain := &sink{}
	if _, ok := wrap(t, plain, "stdout", tp).(probe); ok {
		t.Error("a sink without Probe became probeable")
	}
	ps := &probingSink{}
	w := wrap(t, ps, "kafka", tp)
	pr, ok := w.(probe)
	if !ok {
		t.Fatal("a probeable sink lost Probe")
	}
	if err := pr.Probe(context.Background()); err == nil || ps.probes != 1 {
		t.Errorf("Probe = %v after %d probes of the sink, want its error after 1", err, ps.probes)
	}
	if err := w.Close(); err != nil || !ps.closed {
		t.Errorf("Close = %v, sink closed %v", err, ps.closed)
	}
}

func TestWrapRejects(t *testing.T) {
	if _, err := tracing.Wrap(nil, tracing.Config{System: "kafka"}); err == nil {
		t.Error("Wrap(nil) succeeded")
	}
	if _, err := tracing.Wrap(&sink{}, tracing.Config{}); err == nil {
		t.Error("Wrap without System succeeded")
	}
}

// A key that is not UTF-8 is recorded in base64.
func TestKafkaKeyNotText(t *testing.T) {
	tp, rec := setup(t)
	pub := wrap(t, &sink{}, "kafka", tp)
	if err := pub.Publish(context.Background(), []outbox.Message{{ID: uuid.New(), Topic: "t", Key: []byte{0xff, 0x00}}}); err != nil {
		t.Fatal(err)
	}
	if got := attrs(rec.Ended()[0])["messaging.kafka.message.key"].AsString(); got != "base64:/wA=" {
		t.Errorf("key attribute %q, want base64:/wA=", got)
	}
}

// A span the sampler drops leaves the message as stored: the consumer is
// the child of the writer's span (not of a span no one exports), and a
// message without a stored context gets none.
func TestUnsampledSpanKeepsTheStoredContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	stored, writer := writerContext(t, tp)
	inner := &sink{}
	pub := wrap(t, inner, "kafka", tp)
	msgs := []outbox.Message{{ID: uuid.New(), Topic: "orders", Headers: stored}, {ID: uuid.New(), Topic: "orders"}}
	if err := pub.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded with sampling off", n)
	}
	if got := consumerContext(inner.got[0].Headers); got.TraceID() != writer.TraceID() || got.SpanID() != writer.SpanID() {
		t.Errorf("consumer's parent %v/%v, want the writer's span %v/%v", got.TraceID(), got.SpanID(), writer.TraceID(), writer.SpanID())
	}
	if _, ok := inner.got[1].Headers["traceparent"]; ok {
		t.Errorf("a message without a stored context got %v", inner.got[1].Headers)
	}
}

// keyBatchingSink is a sink that answers publishers.KeyBatcher.
type keyBatchingSink struct {
	sink
	answer bool
}

func (s *keyBatchingSink) KeyBatches() bool { return s.answer }

// The wrapper answers publishers.KeyBatcher for the sink it wraps: tracing does
// not change which messages are sent.
func TestKeyBatchesForwarded(t *testing.T) {
	tp, _ := setup(t)
	type keyBatcher interface{ KeyBatches() bool }
	for _, tc := range []struct {
		name string
		s    tracing.Sink
		want bool
	}{
		{"without KeyBatcher", &sink{}, false},
		{"answering false", &keyBatchingSink{answer: false}, false},
		{"answering true", &keyBatchingSink{answer: true}, true},
	} {
		kb, ok := wrap(t, tc.s, "kafka", tp).(keyBatcher)
		if got := ok && kb.KeyBatches(); got != tc.want {
			t.Errorf("%s: wrapper answers %v, want %v", tc.name, got, tc.want)
		}
	}
}

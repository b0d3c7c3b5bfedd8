package tracing

import (
	"context"
	"encoding/base64"
	"errors"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/outboxrelay/outboxrelay/publishers/tracing"

// AttrAttempt is the attribute holding the message's attempt (1 for the
// first publish, 2 for the first retry, ...): a retried message has one
// span per attempt.
const AttrAttempt = attribute.Key("outbox.attempt")

// Sink is what the wrapper needs of a sink: publishers.Publisher.
type Sink interface {
	Publish(ctx context.Context, msgs []outbox.Message) error
	Close() error
}

// prober is a sink that can be probed (publishers.Prober).
type prober interface {
	Probe(ctx context.Context) error
}

// Config configures Wrap.
type Config struct {
	// System is messaging.system: the sink's name as OpenTelemetry knows
	// it ("kafka", "rabbitmq") or relay run's name for it ("nats",
	// "redis", "webhook", "stdout"). Required.
	System string
	// TracerProvider makes the spans. Defaults to otel.GetTracerProvider(),
	// the global one.
	TracerProvider trace.TracerProvider
}

// Wrap returns a Sink that publishes through s and traces every message
// (see the package documentation). It implements publishers.Prober exactly when
// s does, forwarding Probe unchanged (probes carry no messages and get no
// span). Close closes s.
func Wrap(s Sink, cfg Config) (Sink, error) {
	if s == nil {
		return nil, errors.New("tracing: nil sink")
	}
	if cfg.System == "" {
		return nil, errors.New("tracing: Config.System is empty: name the sink (messaging.system)")
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	p := &publisher{
		sink:   s,
		tracer: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		system: attribute.String(string(semconv.MessagingSystemKey), cfg.System),
		kafka:  cfg.System == "kafka",
	}
	if pr, ok := s.(prober); ok {
		return &probingPublisher{p, pr}, nil
	}
	return p, nil
}

// publisher is the wrapper around a sink that cannot be probed.
type publisher struct {
	sink   Sink
	tracer trace.Tracer
	system attribute.KeyValue
	kafka  bool // add messaging.kafka.message.key
}

// probingPublisher is the wrapper around a sink that can be probed.
type probingPublisher struct {
	*publisher
	prober prober
}

// Probe probes the wrapped sink.
func (p *probingPublisher) Probe(ctx context.Context) error { return p.prober.Probe(ctx) }

// Close closes the wrapped sink.
func (p *publisher) Close() error { return p.sink.Close() }

// keyBatcher is a sink that may take several events of one key in one
// call (publishers.KeyBatcher).
type keyBatcher interface {
	KeyBatches() bool
}

// KeyBatches answers for the wrapped sink (publishers.KeyBatcher): tracing
// changes nothing about which messages it sends.
func (p *publisher) KeyBatches() bool {
	kb, ok := p.sink.(keyBatcher)
	return ok && kb.KeyBatches()
}

// w3c is the propagator of the trace context in the headers: outbox.Write
// stores it with it, consumers read it with it. No global propagator is
// needed.
var w3c = propagation.TraceContext{}

// Publish starts a span per message, parented to the trace context stored
// in its headers, publishes copies of msgs whose headers carry the spans'
// contexts, and ends each span with that message's result.
func (p *publisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	out := make([]outbox.Message, len(msgs))
	spans := make([]trace.Span, len(msgs))
	// One buffer for every span's attributes (Start and SetAttributes copy
	// them), and one span name per run of messages of the same topic.
	buf := make([]attribute.KeyValue, 0, maxAttributes)
	topic, name := "", ""
	for i := range msgs {
		out[i] = msgs[i]
		if i == 0 || out[i].Topic != topic {
			topic, name = out[i].Topic, "send "+out[i].Topic
		}
		spans[i] = p.start(&out[i], name, buf)
	}
	err := p.sink.Publish(ctx, out)
	if err == nil {
		for _, s := range spans {
			s.End()
		}
		return nil
	}
	for i, e := range publishers.PerMessage(err, len(msgs)) {
		if e != nil {
			// error.type: the relay's class of the failure (publishers.ClassOf):
			// "permanent", "unavailable" or "transient".
			spans[i].SetAttributes(semconv.ErrorTypeKey.String(publishers.ClassOf(e).String()))
			spans[i].SetStatus(codes.Error, publishers.Describe(e))
		}
		spans[i].End()
	}
	return err
}

// start starts m's span. When the span is sampled (recording), it gets
// the message's attributes and m.Headers is replaced with a copy carrying
// the span's context. A span the sampler drops changes nothing: the
// message keeps the stored context, so that its consumer is still in the
// writer's trace rather than the child of a span no one exports. buf is
// room for the attributes.
func (p *publisher) start(m *outbox.Message, name string, buf []attribute.KeyValue) trace.Span {
	// The parent is the stored context and nothing else (not a span the
	// caller's ctx may hold); without one, the span is a new root.
	parent := w3c.Extract(context.Background(), propagation.MapCarrier(m.Headers))
	// The attributes a sampler may look at are given at the start.
	attrs := append(buf[:0], p.system, opName, opType, semconv.MessagingDestinationName(m.Topic))
	_, span := p.tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	if !span.IsRecording() {
		return span
	}
	attrs = append(buf[:0],
		semconv.MessagingMessageID(m.ID.String()),
		semconv.MessagingMessageBodySize(len(m.Payload)),
		AttrAttempt.Int(m.Attempt),
	)
	if p.kafka && m.Key != nil {
		attrs = append(attrs, semconv.MessagingKafkaMessageKey(keyText(m.Key)))
	}
	span.SetAttributes(attrs...)

	h := make(map[string]string, len(m.Headers)+2)
	for k, v := range m.Headers {
		if k != outbox.HeaderTraceparent && k != outbox.HeaderTracestate {
			h[k] = v
		}
	}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), span.SpanContext()), propagation.MapCarrier(h))
	m.Headers = h
	return span
}

// maxAttributes is the most attributes start passes at once.
const maxAttributes = 4

// The attributes every span has.
var (
	opName = semconv.MessagingOperationName("send")
	opType = semconv.MessagingOperationTypeSend
)

// keyText is a Kafka key as an attribute value: the key itself when it is
// UTF-8 text, else "base64:" and its standard base64.
func keyText(key []byte) string {
	if utf8.Valid(key) {
		return string(key)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(key)
}

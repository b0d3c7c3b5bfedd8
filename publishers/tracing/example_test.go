package tracing_test

import (
	"context"
	"log"

	kafkago "github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/publishers/tracing"
)

// Wrap a sink before giving it to relay.New; relay run does this for every
// sink when an OTEL_* variable turns tracing on.
func ExampleWrap() {
	tp := sdktrace.NewTracerProvider() // with an exporter in a real program
	defer tp.Shutdown(context.Background())

	sink, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:9092"}})
	if err != nil {
		log.Fatal(err)
	}
	pub, err := tracing.Wrap(sink, tracing.Config{System: "kafka", TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	// relay.New(pool, pub, cfg) ...
}

// kafkaHeaders lets the W3C propagator read a kafka-go message's headers.
type kafkaHeaders []kafkago.Header

func (h kafkaHeaders) Get(key string) string {
	for _, kv := range h {
		if kv.Key == key {
			return string(kv.Value)
		}
	}
	return ""
}
func (h kafkaHeaders) Set(string, string) {} // only read here
func (h kafkaHeaders) Keys() []string {
	keys := make([]string, len(h))
	for i, kv := range h {
		keys[i] = kv.Key
	}
	return keys
}

// A consumer continues the trace of the request that wrote the event: it
// extracts traceparent from the message's headers and starts its span
// from there, a child of the relay's "send" span.
func Example_consumer() {
	tracer := sdktrace.NewTracerProvider().Tracer("billing") // the consumer's own provider
	r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{"127.0.0.1:9092"}, GroupID: "billing", Topic: "orders.created"})
	defer r.Close()
	for {
		msg, err := r.ReadMessage(context.Background())
		if err != nil {
			log.Fatal(err)
		}
		ctx := propagation.TraceContext{}.Extract(context.Background(), kafkaHeaders(msg.Headers))
		ctx, span := tracer.Start(ctx, "process orders.created", trace.WithSpanKind(trace.SpanKindConsumer))
		handle(ctx, msg)
		span.End()
	}
}

func handle(context.Context, kafkago.Message) {}

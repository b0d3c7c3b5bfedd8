package tracing_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/tracing"
)

// discard is a sink that acknowledges everything at once.
type discard struct{}

func (discard) Publish(context.Context, []outbox.Message) error { return nil }
func (discard) Close() error                                    { return nil }

// discardExporter drops the spans the batch processor hands it.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkPublish is the wrapper's CPU cost per message of a 1,000-message
// batch (half of them with a stored writer context, as relay run's
// headers would carry), against the same sink unwrapped: sampled spans
// through the SDK's batch processor to an exporter that drops them, and
// spans the sampler drops (OTEL_TRACES_SAMPLER=always_off).
func BenchmarkPublish(b *testing.B) {
	msgs := make([]outbox.Message, 1000)
	for i := range msgs {
		msgs[i] = outbox.Message{ID: uuid.New(), Topic: "orders.created", Key: fmt.Appendf(nil, "k%d", i), Payload: make([]byte, 200),
			Headers: map[string]string{"content-type": "application/json"}, Attempt: 1}
		if i%2 == 0 {
			msgs[i].Headers["traceparent"] = fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
		}
	}
	run := func(b *testing.B, s tracing.Sink) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Publish(context.Background(), msgs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
	}
	b.Run("unwrapped", func(b *testing.B) { run(b, discard{}) })
	for _, bc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"sampled", sdktrace.AlwaysSample()},
		{"not sampled", sdktrace.NeverSample()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(bc.sampler))
			defer tp.Shutdown(context.Background()) //nolint:errcheck
			w, err := tracing.Wrap(discard{}, tracing.Config{System: "kafka", TracerProvider: tp})
			if err != nil {
				b.Fatal(err)
			}
			run(b, w)
		})
	}
}

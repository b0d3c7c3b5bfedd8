package outbox

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// WriteBatch splits multi-row INSERTs into power-of-two chunks so that a
// connection prepares few statement shapes; the chunks must cover the batch.
func TestChunkSize(t *testing.T) {
	t.Parallel()
	shapes := map[int]bool{}
	for n := 1; n <= 5000; n++ {
		covered := 0
		for covered < n {
			c := chunkSize(n - covered)
			if c < 1 || c > maxChunk || c&(c-1) != 0 || c > n-covered {
				t.Fatalf("chunkSize(%d) = %d: want a power of two in [1, min(%d, remaining)]", n-covered, c, maxChunk)
			}
			shapes[c] = true
			covered += c
		}
	}
	if len(shapes) != 11 {
		t.Errorf("%d statement shapes, want 11 (1..1024)", len(shapes))
	}
	if got := chunkSize(1000); got != 512 {
		t.Errorf("chunkSize(1000) = %d, want 512", got)
	}
}

type ctxKey int

// BenchmarkTraceContextOf is what Write adds per call to look for a span:
// in a ctx without one, as deep as a typical request's (ten values), and
// in one with a span.
func BenchmarkTraceContextOf(b *testing.B) {
	deep := context.Background()
	for i := range 10 {
		deep = context.WithValue(deep, ctxKey(i), i)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	for _, bc := range []struct {
		name string
		ctx  context.Context
	}{
		{"no span", context.Background()},
		{"no span, 10 values", deep},
		{"span", trace.ContextWithSpanContext(deep, sc)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = traceContextOf(bc.ctx)
			}
		})
	}
}

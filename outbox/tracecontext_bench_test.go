package outbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxrelay/outboxrelay/outbox"
	"go.opentelemetry.io/otel/trace"
)

// nopExecutor accepts every statement without a database, so that the
// benchmarks measure the Writer's own work.
type nopExecutor struct{}

func (nopExecutor) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.NewCommandTag("INSERT 0 1"), nil
}

func (nopExecutor) QueryRow(context.Context, string, ...any) pgx.Row { return nil }

// BenchmarkWriteNoSpan is Write's own cost (validation, row, statement)
// with a ctx that holds no span: the path of every application that does
// not trace. Compare with the same benchmark on a build before trace
// context was stored.
func BenchmarkWriteNoSpan(b *testing.B) {
	benchWrite(b, context.Background())
}

// BenchmarkWriteWithSpan is Write with a ctx that holds a sampled span: the
// extra cost of storing traceparent.
func BenchmarkWriteWithSpan(b *testing.B) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	benchWrite(b, trace.ContextWithSpanContext(context.Background(), sc))
}

func benchWrite(b *testing.B, ctx context.Context) {
	msg := outbox.Message{Topic: "orders.created", Key: []byte("order-7"), Payload: make([]byte, 200),
		Headers: map[string]string{"content-type": "application/json"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := outbox.Write(ctx, nopExecutor{}, msg); err != nil {
			b.Fatal(err)
		}
	}
}

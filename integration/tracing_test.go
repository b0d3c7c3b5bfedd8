package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/publishers/tracing"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
	"github.com/outboxrelay/outboxrelay/relay"
)

// newTracer returns a tracer provider whose ended spans rec keeps.
func newTracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// storedHeaders decodes a row's headers column.
func storedHeaders(t *testing.T, r rowState) map[string]string {
	t.Helper()
	var h map[string]string
	if err := json.Unmarshal([]byte(r.Headers), &h); err != nil {
		t.Fatalf("headers %q: %v", r.Headers, err)
	}
	return h
}

// parentOf is the span context a traceparent header names.
func parentOf(h map[string]string) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(h))
	return trace.SpanContextFromContext(ctx)
}

// Every write path (Write on pgx, Write through FromSQL, WriteBatch by COPY
// and by INSERT) stores the trace context of ctx's span in the row's
// headers, beside the message's own headers; a traceparent the caller set
// is kept; a ctx without a span stores nothing.
func TestWriteStoresTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp, _ := newTracer(t)
	ctx, span := tp.Tracer("app").Start(b.ctx, "POST /orders")
	defer span.End()
	ts, err := trace.ParseTraceState("vendor=v1")
	if err != nil {
		t.Fatal(err)
	}
	ctx = trace.ContextWithSpanContext(ctx, span.SpanContext().WithTraceState(ts))
	want := span.SpanContext()
	own := map[string]string{"content-type": "application/json"}

	db, err := sql.Open("pgx", testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	var traced, untraced, explicit []uuid.UUID
	// pgx: Write, WriteBatch by COPY (no id, no dedup key), WriteBatch by
	// INSERT (a dedup key).
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	res, err := b.writer.Write(ctx, tx, outbox.Message{Topic: "orders", Headers: own})
	if err != nil {
		t.Fatal(err)
	}
	traced = append(traced, res.ID)
	for _, batch := range [][]outbox.Message{
		{{Topic: "orders", Headers: own}, {Topic: "orders"}},
		{{Topic: "orders", Headers: own, DedupKey: "d1"}, {Topic: "orders", DedupKey: "d2"}},
	} {
		rs, err := b.writer.WriteBatch(ctx, tx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			traced = append(traced, r.ID)
		}
	}
	res, err = b.writer.Write(ctx, tx, outbox.Message{Topic: "orders", Headers: map[string]string{"traceparent": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"}})
	if err != nil {
		t.Fatal(err)
	}
	explicit = append(explicit, res.ID)
	res, err = b.writer.Write(b.ctx, tx, outbox.Message{Topic: "orders", Headers: own})
	if err != nil {
		t.Fatal(err)
	}
	untraced = append(untraced, res.ID)
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	// database/sql through FromSQL.
	sqlTx, err := db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlTx.Rollback() //nolint:errcheck
	res, err = b.writer.Write(ctx, outbox.FromSQL(sqlTx), outbox.Message{Topic: "orders", Headers: own})
	if err != nil {
		t.Fatal(err)
	}
	traced = append(traced, res.ID)
	if err := sqlTx.Commit(); err != nil {
		t.Fatal(err)
	}

	for i, id := range traced {
		h := storedHeaders(t, b.row(id))
		got := parentOf(h)
		if got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() || !got.IsSampled() {
			t.Errorf("row %d stored parent %v/%v sampled %v, want the writer's span %v/%v", i, got.TraceID(), got.SpanID(), got.IsSampled(), want.TraceID(), want.SpanID())
		}
		if h["tracestate"] != "vendor=v1" {
			t.Errorf("row %d stored tracestate %q, want vendor=v1", i, h["tracestate"])
		}
	}
	if h := storedHeaders(t, b.row(traced[0])); h["content-type"] != "application/json" || len(h) != 3 {
		t.Errorf("stored headers %v: want the message's own beside traceparent and tracestate", h)
	}
	if len(own) != 1 {
		t.Errorf("the caller's headers map was written to: %v", own)
	}
	if h := storedHeaders(t, b.row(explicit[0])); h["traceparent"] != "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01" || len(h) != 1 {
		t.Errorf("explicit traceparent stored as %v, want it kept alone", h)
	}
	if h := storedHeaders(t, b.row(untraced[0])); len(h) != 1 {
		t.Errorf("a write without a span stored %v, want only the message's own header", h)
	}
}

// The trace of a request continues to the consumer: an application span
// writes an event in its transaction; the relay, its Kafka sink wrapped by
// publishers/tracing, publishes it to the Kafka-protocol broker with a
// PRODUCER span child of the application's; a consumer reading the record
// with kafka-go extracts traceparent and finds the writer's trace and the
// relay's span as its parent.
func TestTraceFromWriterToKafkaConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := startBroker(t, kfakebroker.Options{Topics: []string{"orders.created"}})
	tp, rec := newTracer(t)

	ctx, app := tp.Tracer("app").Start(b.ctx, "POST /orders")
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	res, err := b.writer.Write(ctx, tx, outbox.Message{Topic: "orders.created", Key: []byte("order-7"), Payload: []byte(`{"total":42}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	app.End()
	// An event written without a span: its trace starts at the relay.
	orphan := b.write(outbox.Message{Topic: "orders.created", Payload: []byte("no trace")})[0]

	pub, err := tracing.Wrap(newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()}), tracing.Config{System: "kafka", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	b.startRelay(pub, relay.Config{})
	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == 2 }, "events not sent: %v", b.statuses())

	producers := producerSpansByEvent(t, rec)
	recs := byEventID(readTopic(t, br.Addrs(), "orders.created"))
	for _, tc := range []struct {
		name   string
		id     uuid.UUID
		parent trace.SpanContext // of the producer span; invalid for a root
	}{
		{"traced", res.ID, app.SpanContext()},
		{"untraced", orphan, trace.SpanContext{}},
	} {
		got := recs[tc.id.String()]
		if len(got) != 1 {
			t.Fatalf("%s event delivered %d times, want 1", tc.name, len(got))
		}
		// The consumer: the record's headers carry the context to continue.
		h := map[string]string{}
		for _, hd := range got[0].Headers {
			h[hd.Key] = string(hd.Value)
		}
		consumerCtx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(h))
		_, consumer := tp.Tracer("consumer").Start(consumerCtx, "process orders.created", trace.WithSpanKind(trace.SpanKindConsumer))
		consumer.End()

		producer := producers[tc.id.String()]
		if producer == nil {
			t.Fatalf("%s event: no producer span", tc.name)
		}
		if producer.SpanKind() != trace.SpanKindProducer || producer.Name() != "send orders.created" {
			t.Errorf("%s event: producer span %q of kind %v", tc.name, producer.Name(), producer.SpanKind())
		}
		if tc.parent.IsValid() {
			if producer.SpanContext().TraceID() != tc.parent.TraceID() || producer.Parent().SpanID() != tc.parent.SpanID() {
				t.Errorf("%s event: producer span in trace %v under %v, want the writer's %v under %v", tc.name,
					producer.SpanContext().TraceID(), producer.Parent().SpanID(), tc.parent.TraceID(), tc.parent.SpanID())
			}
		} else if producer.Parent().IsValid() {
			t.Errorf("%s event: producer span has parent %v, want a root", tc.name, producer.Parent().SpanID())
		}
		cs := consumer.SpanContext()
		var consumerParent trace.SpanContext
		for _, s := range rec.Ended() {
			if s.SpanContext().SpanID() == cs.SpanID() {
				consumerParent = s.Parent()
			}
		}
		if cs.TraceID() != producer.SpanContext().TraceID() || consumerParent.SpanID() != producer.SpanContext().SpanID() {
			t.Errorf("%s event: consumer span in trace %v under %v, want trace %v under the producer span %v", tc.name,
				cs.TraceID(), consumerParent.SpanID(), producer.SpanContext().TraceID(), producer.SpanContext().SpanID())
		}
	}
	// What the relay holds is not what it published: the stored row keeps
	// the writer's context.
	if got := parentOf(storedHeaders(t, b.row(res.ID))); got.SpanID() != app.SpanContext().SpanID() {
		t.Errorf("stored traceparent names span %v, want the writer's %v", got.SpanID(), app.SpanContext().SpanID())
	}
}

// The wrapper knows nothing of Kafka: through the webhook sink, the
// receiver finds the relay's span in the Outbox-Header-traceparent header,
// child of the writer's span.
func TestTraceFromWriterToWebhookReceiver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tp, rec := newTracer(t)
	var (
		mu       sync.Mutex
		received = map[string]http.Header{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received[r.Header.Get(webhook.HeaderEventID)] = r.Header.Clone()
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	wh, err := webhook.New(webhook.Config{URL: srv.URL + "/events/{topic}"})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := tracing.Wrap(wh, tracing.Config{System: "webhook", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	ctx, app := tp.Tracer("app").Start(b.ctx, "POST /invoices")
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck
	res, err := b.writer.Write(ctx, tx, outbox.Message{Topic: "invoices", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	app.End()

	b.startRelay(pub, relay.Config{})
	await(t, 15*time.Second, func() bool { return b.count("status = 'sent'") == 1 }, "event not sent: %v", b.statuses())

	mu.Lock()
	hdr := received[res.ID.String()]
	mu.Unlock()
	// A receiver strips the sink's prefix to get the message's headers.
	h := map[string]string{}
	for name, v := range hdr {
		if rest, ok := strings.CutPrefix(name, http.CanonicalHeaderKey(webhook.HeaderPrefix)); ok {
			h[strings.ToLower(rest)] = v[0]
		}
	}
	got := parentOf(h)
	producer := producerSpansByEvent(t, rec)[res.ID.String()]
	if producer == nil {
		t.Fatal("no producer span")
	}
	if got.TraceID() != app.SpanContext().TraceID() || got.SpanID() != producer.SpanContext().SpanID() ||
		producer.Parent().SpanID() != app.SpanContext().SpanID() {
		t.Errorf("receiver's parent %v/%v, producer under %v; want trace %v, the producer span %v under the writer's %v",
			got.TraceID(), got.SpanID(), producer.Parent().SpanID(), app.SpanContext().TraceID(), producer.SpanContext().SpanID(), app.SpanContext().SpanID())
	}
	if a := producer.Attributes(); !hasAttr(a, "messaging.system", "webhook") || !hasAttr(a, "messaging.destination.name", "invoices") {
		t.Errorf("producer attributes %v", a)
	}
}

// hasAttr reports whether attrs hold key with the string value.
func hasAttr(attrs []attribute.KeyValue, key, value string) bool {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.AsString() == value
		}
	}
	return false
}

// producerSpansByEvent returns the wrapper's ended spans by event id,
// failing on a second span for one event (no retries happen here).
func producerSpansByEvent(t *testing.T, rec *tracetest.SpanRecorder) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.InstrumentationScope().Name != tracing.ScopeName {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == "messaging.message.id" {
				if out[a.Value.AsString()] != nil {
					t.Errorf("two producer spans for event %s", a.Value.AsString())
				}
				out[a.Value.AsString()] = s
			}
		}
	}
	return out
}

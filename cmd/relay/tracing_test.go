package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Tracing is off unless an OTEL_* variable asks for it; the variables that
// turn it on pick the endpoint as the OpenTelemetry specification says.
func TestTracingFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		env          map[string]string
		wantEndpoint string // "" for off
		wantService  string
	}{
		{"nothing set", nil, "", ""},
		{"a service name alone", map[string]string{"OTEL_SERVICE_NAME": "relay-eu"}, "", ""},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}, "http://collector:4318/v1/traces", "outbox-relay"},
		{"traces endpoint as given", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector/otlp/traces"}, "https://collector/otlp/traces", "outbox-relay"},
		{"exporter otlp alone", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "relay-eu"}, "http://localhost:4318/v1/traces", "relay-eu"},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "", ""},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, "", ""},
		{"service name from resource attributes", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=relay%20eu"}, "http://localhost:4318/v1/traces", "relay eu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tracingFromEnv(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantEndpoint == "" {
				if s != nil {
					t.Fatalf("tracing on (%+v), want off", s)
				}
				if tr, _ := s.start(context.Background(), nil); tr != nil {
					t.Fatal("a tracer provider was built with tracing off")
				}
				return
			}
			if s == nil || s.endpoint != tc.wantEndpoint || s.serviceName != tc.wantService {
				t.Fatalf("settings %+v, want endpoint %q, service %q", s, tc.wantEndpoint, tc.wantService)
			}
		})
	}
}

// With tracing off, the sink is used as it is: no wrapper.
func TestTracingOffWrapsNothing(t *testing.T) {
	t.Parallel()
	var off *relayTracing
	pub := &stdoutSinkForTest{}
	if got := off.wrap("stdout", pub); got != pub {
		t.Errorf("wrap with tracing off returned %T, want the sink itself", got)
	}
	off.startShutdown()
	off.awaitShutdown(nil)
}

type stdoutSinkForTest struct{}

func (*stdoutSinkForTest) Publish(context.Context, []outbox.Message) error { return nil }
func (*stdoutSinkForTest) Close() error                                    { return nil }

// A bad OTEL_* value is a usage error (exit 2) naming the variable,
// reported with the flags' problems before anything starts.
func TestTracingUsageErrors(t *testing.T) {
	t.Parallel()
	base := map[string]string{"OUTBOX_DATABASE_URL": "postgres://postgres@127.0.0.1:1/postgres"}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "invalid value for OTEL_EXPORTER_OTLP_PROTOCOL: grpc is not built into relay run; use http/protobuf"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, "invalid value for OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, "invalid value for OTEL_TRACES_EXPORTER"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "invalid value for OTEL_EXPORTER_OTLP_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "ftp://user:secret@c/x"}, "invalid value for OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "jaeger_remote"}, "invalid value for OTEL_TRACES_SAMPLER"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "invalid value for OTEL_TRACES_SAMPLER_ARG"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_RESOURCE_ATTRIBUTES": "team"}, "invalid value for OTEL_RESOURCE_ATTRIBUTES"},
		{map[string]string{"OTEL_SDK_DISABLED": "yes"}, "invalid value for OTEL_SDK_DISABLED"},
	} {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range tc.env {
			env[k] = v
		}
		code, _, stderr := invoke(context.Background(), env, "run", "--batch-size", "0")
		if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--batch-size") {
			t.Errorf("env %v: exit %d, stderr %q; want 2 with %q beside the flag's problem", tc.env, code, stderr, tc.want)
		}
		if strings.Contains(stderr, "secret") {
			t.Errorf("env %v: stderr shows the endpoint's password: %q", tc.env, stderr)
		}
	}
}

// otlpReceiver is an OTLP/HTTP endpoint that keeps the spans exported to
// it, as a collector would receive them.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		o.resource = rs.GetResource().GetAttributes()
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrValue(attrs []*commonpb.KeyValue, key string) string {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// Shutting tracing down exports the spans still queued: the batch delay is
// 5s, so only the shutdown sends this one. The test gives the shutdown a
// minute instead of tracingShutdownTimeout (200ms, the share of the
// process's exit bound), which a busy machine may overrun.
func TestTracingShutdownExportsTheQueuedSpans(t *testing.T) {
	t.Parallel()
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	s, err := tracingFromEnv(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	rt, err := s.start(context.Background(), logger)
	if err != nil {
		t.Fatal(err)
	}
	rt.within = time.Minute
	_, span := rt.tp.Tracer("test").Start(context.Background(), "queued")
	span.End()
	rt.startShutdown()
	rt.awaitShutdown(logger)
	recv.mu.Lock()
	n := len(recv.spans)
	recv.mu.Unlock()
	if n != 1 {
		t.Errorf("the collector received %d spans at shutdown, want the 1 queued; log:\n%s", n, logs.String())
	}
}

// relay run with an OTLP endpoint exports a PRODUCER span per message,
// child of the span that wrote it; the Kafka consumer continues the trace
// from the record's traceparent. The span is exported by the batcher,
// within 10ms (OTEL_BSP_SCHEDULE_DELAY, read by the SDK from the process's
// environment: the test does not run in parallel); the flush on exit,
// bounded by 200ms, which a busy machine overran, is
// TestTracingShutdownExportsTheQueuedSpans's.
func TestRunExportsProducerSpans(t *testing.T) {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	pool, table := testdb.New(t)
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"orders.created"}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()

	// The application: a span around the transaction that writes the event.
	appTracer := sdktrace.NewTracerProvider()
	defer appTracer.Shutdown(context.Background()) //nolint:errcheck
	ctx, app := appTracer.Tracer("app").Start(context.Background(), "POST /orders")
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Write(ctx, tx, outbox.Message{Topic: "orders.created", Key: []byte("order-7"), Payload: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	app.End()

	env := map[string]string{
		"OUTBOX_DATABASE_URL":         testdb.URL(t),
		"OUTBOX_SCHEMA":               table.Schema,
		"OUTBOX_KAFKA_BROKERS":        strings.Join(br.Addrs(), ","),
		"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL,
		"OTEL_SERVICE_NAME":           "relay-test",
	}
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(runCtx, []string{"run", "--poll-interval", "20ms"}, func(k string) string { return env[k] }, &out, &errOut)
	}()
	await(t, 15*time.Second, func() bool {
		var status string
		_ = pool.QueryRow(context.Background(), "SELECT status FROM "+table.Ident()+" WHERE id = $1", res.ID).Scan(&status)
		return status == "sent"
	})
	await(t, time.Minute, func() bool {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		return len(recv.spans) > 0
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, errOut.String())
	}

	recv.mu.Lock()
	spans, resource := recv.spans, recv.resource
	recv.mu.Unlock()
	if len(spans) != 1 {
		t.Fatalf("collector received %d spans, want 1; stderr:\n%s", len(spans), errOut.String())
	}
	s := spans[0]
	appSC := app.SpanContext()
	appTrace, appSpan := appSC.TraceID(), appSC.SpanID()
	if s.Name != "send orders.created" || s.Kind != tracepb.Span_SPAN_KIND_PRODUCER ||
		!bytes.Equal(s.TraceId, appTrace[:]) || !bytes.Equal(s.ParentSpanId, appSpan[:]) {
		t.Errorf("span %q kind %v trace %x parent %x; want \"send orders.created\", producer, trace %v, parent %v",
			s.Name, s.Kind, s.TraceId, s.ParentSpanId, appSC.TraceID(), appSC.SpanID())
	}
	for k, v := range map[string]string{"messaging.system": "kafka", "messaging.destination.name": "orders.created",
		"messaging.message.id": res.ID.String(), "messaging.kafka.message.key": "order-7"} {
		if got := attrValue(s.Attributes, k); got != v {
			t.Errorf("span attribute %s = %q, want %q", k, got, v)
		}
	}
	if got := attrValue(resource, "service.name"); got != "relay-test" {
		t.Errorf("service.name %q, want relay-test", got)
	}

	// The consumer.
	recs := kafkatest.ReadTopic(t, br.Addrs(), "orders.created", nil)
	if len(recs) != 1 {
		t.Fatalf("topic holds %d records, want 1", len(recs))
	}
	h := map[string]string{}
	for _, hd := range recs[0].Headers {
		h[hd.Key] = string(hd.Value)
	}
	parent := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(h)))
	if parent.TraceID() != appSC.TraceID() || hex.EncodeToString(s.SpanId) != parent.SpanID().String() {
		t.Errorf("consumer's parent %v/%v, want the app's trace %v and the exported producer span %x", parent.TraceID(), parent.SpanID(), appSC.TraceID(), s.SpanId)
	}
}

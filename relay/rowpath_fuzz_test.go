package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
	"github.com/outboxrelay/outboxrelay/publishers/route"
	"github.com/outboxrelay/outboxrelay/publishers/stdout"
	"github.com/outboxrelay/outboxrelay/publishers/tracing"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
	"github.com/outboxrelay/outboxrelay/relay"
	"github.com/outboxrelay/outboxrelay/relay/metrics"
)

// fuzzMaxTopics is the metrics' topic bound in FuzzRowPath: small, so
// that the fuzzer reaches "<other>".
const fuzzMaxTopics = 4

// FuzzRowPath feeds a row of fuzzed columns, with a good row beside it,
// through the whole path a row takes, on real components: inserted into a
// SQL_ASCII database (whose text columns take any bytes but NUL, as a
// client that does not check UTF-8 may leave them), claimed by
// ProcessBatch, counted by the Observer (metrics.Metrics and a checker),
// published to every sink (Kafka on a kfake broker, NATS, RabbitMQ,
// Redis, a webhook receiver, stdout), each behind --route's router,
// metrics and tracing as relay run wraps them, where each builds its
// message, and recorded. Nothing may panic and ProcessBatch must not fail;
// both rows leave processing; a row with an invalid topic fails and
// reaches no sink, the good row reaches every sink; every reason stored
// is valid UTF-8; every metric label is valid UTF-8 and the topic labels
// stay within the bound; observers see only valid topics and
// relay.InvalidTopic; every span's name, attributes and status are valid
// UTF-8 (OTLP refuses anything else). Rows the database refuses (a NUL
// byte, headers that are not JSON) are skipped: no client can leave them.
func FuzzRowPath(f *testing.F) {
	for _, s := range []struct {
		topic, headers string
		key            []byte
		attempt        int32
		created        uint8
	}{
		{"orders", `{}`, []byte("k"), 0, 0},
		{"acc.p\xffA", `{}`, []byte("k"), 0, 0}, // issue 37: client_golang panicked on the label
		{strings.Repeat("t", 10000), `{}`, nil, 0, 0},
		{"bad topic!", `{}`, nil, 0, 0},
		{"", `{}`, nil, 0, 0},
		{"\xc3\xa9t\xc3\xa9", `{}`, nil, 0, 0},
		{"orders", `{"a": "x\\u0001\\t", "B": " y"}`, nil, 0, 0},
		{"orders", `{"a": 1}`, []byte{0xff, 0}, 0, 0},
		{"orders", `{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "bad state"}`, []byte("\xff"), 0, 0},
		{"orders", `{"nats-msg-id": "x", "outbox-key": "y", "x": "a\r\nb"}`, []byte(" padded "), 0, 0},
		{"orders", `null`, nil, 0, 1},
		{"orders", `{}`, nil, 9, 0},
		{"orders", `{}`, nil, 2147483647, 2},
		{"$JS.API", `{}`, nil, 0, 0},
		{"a..b", `{}`, nil, 0, 0},
		{"t1", `{}`, nil, 0, 0}, // t1 to t4 with orders: beyond fuzzMaxTopics
		{"t2", `{}`, nil, 0, 0},
		{"t3", `{}`, nil, 0, 0},
		{"t4", `{}`, nil, 0, 0},
	} {
		f.Add([]byte("\x01\x89\x0a\x5d\xac\x96\x77\x4b\xbc\xce\xb3\x02\x09\x9a\x80\x57"), s.topic, s.key, []byte("payload"), []byte(s.headers), s.attempt, s.created, int64(1714564800e9))
	}
	p := newRowPath(f)
	f.Fuzz(p.run)
}

// goodTopic is the topic of the good row of each FuzzRowPath input.
const goodTopic = "fuzz.good"

// rowPath is what FuzzRowPath runs its rows through.
type rowPath struct {
	pool    *pgxpool.Pool
	table   outbox.Table
	r       *relay.Relay
	reg     *prometheus.Registry
	spans   *tracetest.InMemoryExporter
	sinks   *everySink
	checker *topicChecker
}

// newRowPath sets the path up on the test's own SQL_ASCII database, the
// machine's NATS, RabbitMQ and Redis, and brokers and receivers of its
// own. NATS subjects and RabbitMQ routing keys start with a random
// prefix, as do Redis streams, so that no other test's stream or queue
// gets the messages.
func newRowPath(tb testing.TB) *rowPath {
	tb.Helper()
	pool, table, _ := testdb.NewSQLASCII(tb)
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{goodTopic}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(br.Close)
	receiver := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	tb.Cleanup(receiver.Close)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "outboxfuzz-" + hex.EncodeToString(b[:])
	cleanRedis(tb, prefix+":")

	raw := map[string]publishers.Publisher{"stdout": stdout.New(io.Discard)}
	open := func(name string, p publishers.Publisher, err error) {
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		raw[name] = p
	}
	kp, err := kafka.New(kafka.Config{Brokers: br.Addrs(), MaxAttempts: 1})
	open("kafka", kp, err)
	np, err := natssink.New(natssink.Config{PublishTimeout: 5 * time.Second})
	open("nats", np, err)
	rp, err := rabbitmq.New(rabbitmq.Config{PublishTimeout: 5 * time.Second})
	open("rabbitmq", rp, err)
	sp, err := redisstream.New(redisstream.Config{StreamPrefix: prefix + ":", MaxLen: 1})
	open("redis", sp, err)
	wp, err := webhook.New(webhook.Config{URL: receiver.URL + "/events/{topic}", Secrets: []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))}})
	open("webhook", wp, err)

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{MaxTopics: fuzzMaxTopics})
	if err != nil {
		tb.Fatal(err)
	}
	sinks := &everySink{}
	for name, pub := range raw {
		tb.Cleanup(func() { _ = pub.Close() })
		traced, err := tracing.Wrap(pub, tracing.Config{System: name, TracerProvider: tp})
		if err != nil {
			tb.Fatal(err)
		}
		dest := "" // the topic itself
		if name == "nats" || name == "rabbitmq" {
			dest = prefix + ".{topic}"
		}
		routed, err := route.New([]route.Rule{{Pattern: "*", Sink: name, Destination: dest}}, map[string]route.Sink{name: m.Publisher(name, traced)}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		sinks.all = append(sinks.all, routed)
	}
	checker := &topicChecker{}
	r, err := relay.New(pool, sinks, relay.Config{
		Table: table, ID: "fuzz", MaxAttempts: 5, KeepSent: true, PublishTimeout: 10 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Observer: relay.Observers(m, checker),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return &rowPath{pool: pool, table: table, r: r, reg: reg, spans: spans, sinks: sinks, checker: checker}
}

// cleanRedis deletes the streams under prefix when tb ends.
func cleanRedis(tb testing.TB, prefix string) {
	opts, err := redis.ParseURL(redisstream.DefaultURL)
	if err != nil {
		tb.Fatal(err)
	}
	c := redis.NewClient(opts)
	tb.Cleanup(func() {
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("delete the streams %s*: %v", prefix, err)
		}
	})
}

// run is one FuzzRowPath input.
func (p *rowPath) run(t *testing.T, idBytes []byte, topic string, key, payload, headers []byte, attempt int32, created uint8, createdAt int64) {
	ctx := t.Context()
	if _, err := p.pool.Exec(ctx, "DELETE FROM "+p.table.Ident()); err != nil {
		t.Fatal(err)
	}
	var id uuid.UUID
	copy(id[:], idBytes)
	good := uuid.Must(uuid.NewV7())
	at := []string{time.Unix(0, createdAt).UTC().Format(time.RFC3339Nano), "infinity", "-infinity"}[created%3]
	if payload == nil {
		payload = []byte{} // NOT NULL
	}
	if _, err := p.pool.Exec(ctx, "INSERT INTO "+p.table.Ident()+` (id, topic, key, payload, headers, attempt, created_at) VALUES
		($1, convert_from($2, 'SQL_ASCII'), $3, $4, convert_from($5, 'SQL_ASCII')::jsonb, $6, $7::timestamptz),
		($8, $9, 'k', 'good', '{}', 0, now())`,
		id, []byte(topic), key, payload, headers, attempt, at, good, goodTopic); err != nil {
		t.Logf("the database refuses the row: %v", err)
		return
	}
	p.sinks.reset()
	p.spans.Reset()
	res, err := p.r.ProcessBatch(ctx, 10)
	if err != nil {
		t.Fatalf("ProcessBatch: %v", err)
	}
	if res.Claimed != 2 {
		t.Fatalf("claimed %d rows, want 2 (%+v)", res.Claimed, res)
	}
	handed := p.sinks.handed()
	if !handed[good] {
		t.Errorf("the good row did not reach the sinks")
	}
	invalid := outbox.ValidateTopic(topic) != nil
	if invalid && handed[id] {
		t.Errorf("the row of invalid topic %q reached the sinks", topic)
	}
	rows, err := p.pool.Query(ctx, "SELECT id, status, coalesce(last_error, '') FROM "+p.table.Ident())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var rid uuid.UUID
		var status, reason string
		if err := rows.Scan(&rid, &status, &reason); err != nil {
			t.Fatal(err)
		}
		switch {
		case status == "processing":
			t.Errorf("row %s (topic %q) is still processing: %+v", rid, topic, res)
		case !utf8.ValidString(reason) || strings.IndexByte(reason, 0) >= 0:
			t.Errorf("row %s: reason %q cannot be stored in a UTF8 database", rid, reason)
		case rid == id && invalid && (status != "failed" || reason == ""):
			t.Errorf("row of invalid topic %q: %s, %q; want failed with a reason", topic, status, reason)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := p.checker.err(); err != nil {
		t.Fatal(err)
	}
	checkLabels(t, p.reg)
	checkSpans(t, p.spans.GetSpans())
}

// everySink publishes each batch to every sink at once; a message's
// result is the first failure of a sink with it, in the order of the
// sinks. It remembers the ids it was handed since its last reset.
type everySink struct {
	all  []publishers.Publisher
	mu   sync.Mutex
	seen map[uuid.UUID]bool
}

func (e *everySink) Publish(ctx context.Context, msgs []outbox.Message) error {
	e.mu.Lock()
	for _, m := range msgs {
		e.seen[m.ID] = true
	}
	e.mu.Unlock()
	each := make([][]error, len(e.all))
	var wg sync.WaitGroup
	for i, s := range e.all {
		wg.Go(func() { each[i] = publishers.PerMessage(s.Publish(ctx, msgs), len(msgs)) })
	}
	wg.Wait()
	results := make([]error, len(msgs))
	for _, sink := range each {
		for i, err := range sink {
			if results[i] == nil {
				results[i] = err
			}
		}
	}
	return publishers.Summarize(results)
}

func (e *everySink) Close() error { return nil } // each sink is closed by the test

func (e *everySink) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = map[uuid.UUID]bool{}
}

func (e *everySink) handed() map[uuid.UUID]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen
}

// topicChecker is an Observer that records the first topic of an event
// that is neither valid nor relay.InvalidTopic.
type topicChecker struct {
	mu  sync.Mutex
	bad error
}

func (c *topicChecker) Observe(e relay.Event) {
	for _, t := range e.Topics {
		if t.Topic != relay.InvalidTopic && outbox.ValidateTopic(t.Topic) != nil {
			c.mu.Lock()
			if c.bad == nil {
				c.bad = fmt.Errorf("event %s has topic %q", e.Kind, t.Topic)
			}
			c.mu.Unlock()
		}
	}
}

func (c *topicChecker) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bad
}

// checkLabels checks that the registry gathers, every label value is
// valid UTF-8, and each metric has at most fuzzMaxTopics topics besides
// metrics.OtherTopic and metrics.InvalidTopic.
func checkLabels(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range families {
		topics := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !utf8.ValidString(l.GetValue()) {
					t.Fatalf("%s{%s=%q}: not UTF-8", mf.GetName(), l.GetName(), l.GetValue())
				}
				if v := l.GetValue(); l.GetName() == "topic" && v != metrics.OtherTopic && v != metrics.InvalidTopic {
					topics[v] = true
				}
			}
		}
		if len(topics) > fuzzMaxTopics {
			t.Fatalf("%s has %d topic labels, more than %d", mf.GetName(), len(topics), fuzzMaxTopics)
		}
	}
}

// checkSpans checks that every text of the spans can be exported.
func checkSpans(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name, s.Status.Description}
		for _, a := range s.Attributes {
			texts = append(texts, string(a.Key), a.Value.Emit())
		}
		for _, text := range texts {
			if !utf8.ValidString(text) {
				t.Fatalf("span %q holds %q, which is not UTF-8", s.Name, text)
			}
		}
	}
	if len(spans) == 0 {
		t.Fatal("no span: the sinks were not traced")
	}
}

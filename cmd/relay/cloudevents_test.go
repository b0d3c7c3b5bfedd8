package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// ceEvents writes the events the CloudEvents tests send, on topic: JSON
// with a key and an extension (tenant), bytes without a key, and one whose
// ce-type header names its type. It returns them with their ids and
// created_at.
func ceEvents(t *testing.T, pool *pgxpool.Pool, table outbox.Table, topic string) []outbox.Message {
	t.Helper()
	ctx := context.Background()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []outbox.Message{
		{Topic: topic, Key: []byte("customer-1"), Payload: []byte(`{"n":1}`),
			Headers: map[string]string{"content-type": "application/json", "tenant": "acme", "trace-id": "t-1"}},
		{Topic: topic, Payload: []byte{0xff, 0x00, 'b'}, Headers: map[string]string{"content-type": "application/octet-stream", "tenant": "acme"}},
		{Topic: topic, Key: []byte("customer-2"), Payload: []byte(`{"n":3}`),
			Headers: map[string]string{"content-type": "application/json", "tenant": "acme", "ce-type": "com.example.order.paid"}},
	}
	for i := range msgs {
		res, err := w.Write(ctx, pool, msgs[i])
		if err != nil {
			t.Fatal(err)
		}
		msgs[i].ID = res.ID
		if err := pool.QueryRow(ctx, "SELECT created_at FROM "+table.Ident()+" WHERE id = $1", res.ID).Scan(&msgs[i].CreatedAt); err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

// runUntilSent runs relay run with args until the table's first n events
// are sent, and returns its log.
func runUntilSent(t *testing.T, pool *pgxpool.Pool, table outbox.Table, n int, env map[string]string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"run", "--poll-interval", "20ms", "--log-format", "json"}, args...),
			func(k string) string { return env[k] }, &out, &errOut)
	}()
	testdb.AwaitSent(t, pool, table, n, 60*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, errOut.String())
	}
	return errOut.String()
}

// checkEvent checks the CloudEvent e a reader decoded for m, sent with
// source, its data as data (the bytes the reader holds).
func checkEvent(t *testing.T, e event.Event, m outbox.Message, source string) {
	t.Helper()
	if err := e.Validate(); err != nil {
		t.Errorf("event %s: invalid CloudEvent: %v", m.ID, err)
	}
	wantType, wantSubject := m.Topic, string(m.Key)
	if ty := m.Headers["ce-type"]; ty != "" {
		wantType = ty
	}
	if e.SpecVersion() != "1.0" || e.ID() != m.ID.String() || e.Source() != source || e.Type() != wantType || e.Subject() != wantSubject {
		t.Errorf("event %s: specversion %q id %q source %q type %q subject %q; want 1.0, %s, %s, %s, %q",
			m.ID, e.SpecVersion(), e.ID(), e.Source(), e.Type(), e.Subject(), m.ID, source, wantType, wantSubject)
	}
	if !e.Time().Equal(m.CreatedAt) {
		t.Errorf("event %s: time %v; want created_at %v", m.ID, e.Time(), m.CreatedAt)
	}
	if e.DataContentType() != m.Headers["content-type"] || !bytes.Equal(e.Data(), m.Payload) {
		t.Errorf("event %s: datacontenttype %q data %q; want %q, %q", m.ID, e.DataContentType(), e.Data(), m.Headers["content-type"], m.Payload)
	}
	if ext := e.Extensions(); ext["tenant"] != "acme" || ext["traceid"] != nil || len(ext) != 1 {
		t.Errorf("event %s: extensions %v; want tenant=acme alone", m.ID, ext)
	}
}

// relay run --sink webhook --cloudevents binary, then a --route rule with
// +cloudevents=structured: the CloudEvents SDK's HTTP binding reads every
// request as the event, in the mode sent; the relay's own headers stay.
func TestRunCloudEventsOnWebhook(t *testing.T) {
	t.Parallel()
	addr, path := startReceiverProcess(t)
	pool, table := testdb.NewEmpty(t)
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema}
	if code, out, stderr := invoke(context.Background(), env, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, stderr)
	}
	url := "http://" + addr + "/hooks/{topic}"
	binary := ceEvents(t, pool, table, "ce.binary")
	logs := runUntilSent(t, pool, table, len(binary), env, "--sink", "webhook", "--webhook-url", url,
		"--cloudevents", "binary", "--cloudevents-source", "/shop")
	if !strings.Contains(logs, `"msg":"cloudevents","mode":"binary","source":"/shop","binding":"HTTP"`) {
		t.Errorf("the log does not show the CloudEvents settings:\n%s", logs)
	}
	structured := ceEvents(t, pool, table, "ce.structured")
	env["OUTBOX_WEBHOOK_URL"] = url
	runUntilSent(t, pool, table, len(binary)+len(structured), env, "--route", "ce.*=webhook+cloudevents=structured",
		"--cloudevents", "binary", "--cloudevents-source", "/shop")

	got := map[string]receivedRequest{}
	for _, r := range readReceived(t, path) {
		got[r.Header.Get("outbox-event-id")] = r
	}
	for _, m := range append(binary, structured...) {
		r, ok := got[m.ID.String()]
		if !ok {
			t.Errorf("event %s did not arrive", m.ID)
			continue
		}
		req := httptest.NewRequest("POST", r.URI, bytes.NewReader(r.Body))
		req.Header = r.Header
		e, err := cehttp.NewEventFromHTTPRequest(req)
		if err != nil {
			t.Errorf("event %s: the SDK cannot read the request: %v\n%v", m.ID, err, r.Header)
			continue
		}
		checkEvent(t, *e, m, "/shop")
		wantCT, wantBody := m.Headers["content-type"], m.Payload
		if m.Topic == "ce.structured" {
			wantCT, wantBody = "application/cloudevents+json", nil
		}
		if ct := r.Header.Get("Content-Type"); ct != wantCT || wantBody != nil && !bytes.Equal(r.Body, wantBody) {
			t.Errorf("event %s (%s): Content-Type %q body %q", m.ID, m.Topic, ct, r.Body)
		}
		if r.Header.Get("webhook-id") != m.ID.String() || r.Header.Get("Outbox-Topic") != m.Topic || r.Header.Get("Outbox-Header-tenant") != "acme" {
			t.Errorf("event %s: the relay's own headers changed: %v", m.ID, r.Header)
		}
	}
}

// relay run --sink kafka --cloudevents binary: read back with kafka-go,
// every record carries the attributes as the Kafka protocol binding
// (3.2.3) names them: ce_ headers, content-type for datacontenttype, the
// value as it was. (The SDK's Kafka bindings pull in sarama or
// confluent-kafka-go: the headers are decoded by the binding's rules
// here, into an SDK event that validates.)
func TestRunCloudEventsOnKafkaBinary(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"ce.kafka"}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	msgs := ceEvents(t, pool, table, "ce.kafka")
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema,
		"OUTBOX_KAFKA_BROKERS": strings.Join(br.Addrs(), ","), "OUTBOX_CLOUDEVENTS": "binary"}
	runUntilSent(t, pool, table, len(msgs), env, "--sink", "kafka")

	recs := kafkatest.ReadTopic(t, br.Addrs(), "ce.kafka", nil)
	byID := map[string]kafkatest.Record{}
	for _, r := range recs {
		byID[r.EventID()] = r
	}
	for _, m := range msgs {
		r, ok := byID[m.ID.String()]
		if !ok {
			t.Errorf("event %s did not arrive", m.ID)
			continue
		}
		h := map[string]string{}
		for _, kh := range r.Headers {
			h[kh.Key] = string(kh.Value)
		}
		e := eventFromHeaders(t, h, "ce_", r.Value)
		checkEvent(t, e, m, "/outboxrelay")
		if !bytes.Equal(r.Key, m.Key) {
			t.Errorf("event %s: key %q; want %q", m.ID, r.Key, m.Key)
		}
	}
}

// eventFromHeaders decodes a binary-mode event by its binding's rules:
// the attributes from the headers named prefix+NAME, datacontenttype from
// content-type, data as it is.
func eventFromHeaders(t *testing.T, h map[string]string, prefix string, data []byte) event.Event {
	t.Helper()
	e := event.New()
	for key, v := range h {
		switch name, isAttr := strings.CutPrefix(key, prefix); {
		case key == "content-type":
			e.SetDataContentType(v)
		case !isAttr:
		case name == "specversion":
			e.SetSpecVersion(v)
		case name == "id":
			e.SetID(v)
		case name == "source":
			e.SetSource(v)
		case name == "type":
			e.SetType(v)
		case name == "subject":
			e.SetSubject(v)
		case name == "time":
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				t.Errorf("%stime %q: %v", prefix, v, err)
			}
			e.SetTime(ts)
		default:
			e.SetExtension(name, v)
		}
	}
	e.DataEncoded = data
	return e
}

// relay run with --cloudevents binary and routes to NATS and RabbitMQ:
// NATS messages carry the attributes as ce- headers and datacontenttype
// as content-type (NATS binding 1.0.1, 3.1); RabbitMQ messages as
// cloudEvents_ headers and the content_type property (the AMQP binding,
// its application properties being 0-9-1's headers table).
func TestRunCloudEventsOnNATSAndRabbitMQBinary(t *testing.T) {
	t.Parallel()
	natsURL := os.Getenv("OUTBOX_TEST_NATS_URL")
	if natsURL == "" {
		natsURL = natssink.DefaultURL
	}
	rabbitURL := os.Getenv("OUTBOX_TEST_RABBITMQ_URL")
	if rabbitURL == "" {
		rabbitURL = rabbitmq.DefaultURL
	}
	tag := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	js := natsStream(t, natsURL)
	natsTopic, stream := "relayce."+tag+".orders", "RELAYCE_"+tag
	createNATSStream(t, js, stream, natsTopic)
	ch := rabbitChannel(t, rabbitURL)
	exchange, queue := "outboxrelay-ce-"+tag, "rmqce."+tag+".orders"
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-expires": int32(600_000)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	if err := ch.QueueBind(queue, queue, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	pool, table := testdb.New(t)
	toNATS, toRabbit := ceEvents(t, pool, table, natsTopic), ceEvents(t, pool, table, queue)
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema,
		"OUTBOX_NATS_URL": natsURL, "OUTBOX_RABBITMQ_URL": rabbitURL, "OUTBOX_RABBITMQ_EXCHANGE": exchange}
	runUntilSent(t, pool, table, len(toNATS)+len(toRabbit), env, "--cloudevents", "binary",
		"--route", "relayce.*=nats", "--route", "rmqce.*=rabbitmq")

	got := map[string]event.Event{}
	for _, msg := range readNATSStream(t, js, stream) {
		h := map[string]string{}
		for key, v := range msg.Headers() {
			h[strings.ToLower(key)] = v[0]
		}
		got[h["outbox-event-id"]] = eventFromHeaders(t, h, "ce-", msg.Data())
	}
	for _, d := range getAll(t, ch, queue) {
		h := map[string]string{}
		for key, v := range d.Headers {
			if s, ok := v.(string); ok && key != "content-type" {
				h[key] = s
			}
		}
		if d.ContentType != "" {
			h["content-type"] = d.ContentType // the property, not the header
		}
		got[h["outbox-event-id"]] = eventFromHeaders(t, h, "cloudEvents_", d.Body)
	}
	for _, m := range append(toNATS, toRabbit...) {
		if e, ok := got[m.ID.String()]; !ok {
			t.Errorf("event %s (%s) did not arrive", m.ID, m.Topic)
		} else {
			checkEvent(t, e, m, "/outboxrelay")
		}
	}
}

// relay run --sink redis --cloudevents structured: each entry's payload is
// an event of the JSON format, which the SDK reads and validates.
func TestRunCloudEventsOnRedisStructured(t *testing.T) {
	t.Parallel()
	addr := redisTestAddr(t)
	pool, table := testdb.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	stream := "outboxrelay-ce-" + hex.EncodeToString(b) + ":ce.redis"
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	msgs := ceEvents(t, pool, table, "ce.redis")
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema, "OUTBOX_REDIS_URL": "redis://" + addr + "/0"}
	runUntilSent(t, pool, table, len(msgs), env, "--sink", "redis", "--redis-stream-prefix", strings.TrimSuffix(stream, "ce.redis"),
		"--cloudevents", "structured", "--cloudevents-source", "urn:shop")

	entries, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]redis.XMessage{}
	for _, x := range entries {
		byID[x.Values["event_id"].(string)] = x
	}
	for _, m := range msgs {
		x, ok := byID[m.ID.String()]
		if !ok {
			t.Errorf("event %s did not arrive", m.ID)
			continue
		}
		var e event.Event
		if err := json.Unmarshal([]byte(x.Values["payload"].(string)), &e); err != nil {
			t.Errorf("event %s: the SDK cannot read %s: %v", m.ID, x.Values["payload"], err)
			continue
		}
		checkEvent(t, e, m, "urn:shop")
		var headers map[string]string
		_ = json.Unmarshal([]byte(x.Values["headers"].(string)), &headers)
		if headers["content-type"] != "application/cloudevents+json" || headers["tenant"] != "acme" {
			t.Errorf("event %s: headers %v", m.ID, headers)
		}
	}
}

// Bad CloudEvents settings are usage errors naming the flag.
func TestCloudEventsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sink", "stdout", "--cloudevents", "json"}, "invalid value for --cloudevents (OUTBOX_CLOUDEVENTS)"},
		{[]string{"--sink", "stdout", "--cloudevents", "binary", "--cloudevents-source", "my source"}, "invalid value for --cloudevents-source (OUTBOX_CLOUDEVENTS_SOURCE)"},
		{[]string{"--route", "*=stdout+cloudevents=binery"}, "+cloudevents=binary, +cloudevents=structured or +cloudevents=off"},
	} {
		code, _, stderr := invoke(context.Background(), map[string]string{"OUTBOX_DATABASE_URL": "postgres://nobody@127.0.0.1:1/x"}, append([]string{"run"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("run %q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// relay run --sink rabbitmq publishes every committed event, and no
// rolled-back one, to the queue bound to its topic on --rabbitmq-exchange:
// read back with amqp091-go, each arrives once with its id, payload, key
// and headers, and the keyed events of an --ordered-topics topic arrive in
// write order. The log shows the sink's configuration, password redacted.
func TestRunWithRabbitMQSink(t *testing.T) {
	t.Parallel()
	brokerURL := os.Getenv("OUTBOX_TEST_RABBITMQ_URL")
	if brokerURL == "" {
		brokerURL = rabbitmq.DefaultURL
	}
	ch := rabbitChannel(t, brokerURL)
	tag := uuid.NewString()[:8]
	exchange := "outboxrelay-e2e-" + tag
	ordered, unordered := "rmqe2e."+tag+".orders", "rmqe2e."+tag+".audit"
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{ordered, unordered} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-expires": int32(600_000)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
		if err := ch.QueueBind(q, q, exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}

	pool, table := testdb.New(t)
	env := map[string]string{
		"OUTBOX_DATABASE_URL":           testdb.URL(t),
		"OUTBOX_SCHEMA":                 table.Schema,
		"OUTBOX_RABBITMQ_URL":           brokerURL,
		"OUTBOX_RABBITMQ_EXCHANGE":      exchange,
		"OUTBOX_RABBITMQ_MAX_IN_FLIGHT": "7",
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}

	// Committed: five keys of the ordered topic, ten events each, written
	// interleaved in transactions of several events; events with a binary
	// key, without a key, with the empty key, with headers, on another
	// topic.
	committed := writeKeyRounds(t, w, pool, ordered, 5, 10)
	committed = append(committed, writeTx(t, w, pool, []outbox.Message{
		{Topic: unordered, Key: []byte{0, 0xff, '\n'}, Payload: []byte{1, 2, 3, 0, 255}},
		{Topic: unordered, Payload: []byte("no key")},
		{Topic: unordered, Key: []byte{}, Payload: []byte("empty key")},
		{Topic: unordered, Key: []byte("k"), Payload: []byte("with headers"),
			Headers: map[string]string{"content-type": "application/json", "trace-id": "00-abc-01", "unicode": "ünïcødé ✓"}},
	}, true)...)
	rolledBack := writeTx(t, w, pool, []outbox.Message{
		{Topic: ordered, Key: []byte("customer-0"), Payload: []byte("rolled back")},
		{Topic: unordered, Payload: []byte("rolled back too")},
	}, false)

	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "rabbitmq", "--poll-interval", "20ms", "--batch-size", "16",
			"--ordered-topics", ordered, "--log-format", "json"},
			func(k string) string { return env[k] }, &runOut, &runErr)
	}()
	testdb.AwaitSent(t, pool, table, len(committed), 30*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run exit %d; stderr:\n%s", code, syncbuf.Tail(runErr.String(), 4000))
	}
	logged := runErr.String()
	if !strings.Contains(logged, `"msg":"rabbitmq sink"`) || !strings.Contains(logged, `"exchange":"`+exchange+`"`) {
		t.Errorf("relay run did not log the RabbitMQ sink's configuration:\n%s", syncbuf.Tail(logged, 4000))
	}
	if u, _ := amqp.ParseURI(brokerURL); u.Password != "" && strings.Contains(logged+runOut.String(), ":"+u.Password+"@") {
		t.Errorf("relay run shows the broker password:\n%s", syncbuf.Tail(logged, 4000))
	}

	byID := map[string]amqp.Delivery{}
	keyOrder := map[string][]string{} // key -> event ids in queue order
	total := 0
	for _, q := range []string{ordered, unordered} {
		for _, d := range getAll(t, ch, q) {
			total++
			if _, dup := byID[d.MessageId]; dup {
				t.Errorf("event %s arrived twice", d.MessageId)
			}
			byID[d.MessageId] = d
			if q == ordered {
				key, _ := d.Headers[rabbitmq.HeaderKey].(string)
				keyOrder[key] = append(keyOrder[key], d.MessageId)
			}
		}
	}
	for _, m := range rolledBack {
		if _, ok := byID[m.ID.String()]; ok {
			t.Errorf("rolled-back event %s (%q) arrived", m.ID, m.Payload)
		}
	}
	if total != len(committed) {
		t.Errorf("%d messages arrived for %d committed events", total, len(committed))
	}
	wantOrder := map[string][]string{}
	for _, m := range committed {
		d, ok := byID[m.ID.String()]
		if !ok {
			t.Errorf("committed event %s (%q) did not arrive", m.ID, m.Payload)
			continue
		}
		if d.RoutingKey != m.Topic || d.Exchange != exchange || !bytes.Equal(d.Body, m.Payload) {
			t.Errorf("event %s arrived through %s/%s with %q, written to %s with %q", m.ID, d.Exchange, d.RoutingKey, d.Body, m.Topic, m.Payload)
		}
		headers := map[string]string{}
		var key []byte
		for name, v := range d.Headers {
			s, _ := v.(string)
			switch name {
			case outbox.HeaderEventID:
				if s != m.ID.String() {
					t.Errorf("event %s: header %s is %q", m.ID, name, s)
				}
			case rabbitmq.HeaderKey:
				key = []byte(s)
			default:
				headers[name] = s
			}
		}
		if !bytes.Equal(key, m.Key) || (key == nil) != (m.Key == nil) {
			t.Errorf("event %s: key %q arrived as %q", m.ID, m.Key, key)
		}
		if len(headers) != len(m.Headers) || !maps.Equal(headers, m.Headers) {
			t.Errorf("event %s: headers %q arrived as %q", m.ID, m.Headers, headers)
		}
		if d.DeliveryMode != amqp.Persistent {
			t.Errorf("event %s: delivery mode %d, want persistent", m.ID, d.DeliveryMode)
		}
		if m.Topic == ordered {
			wantOrder[string(m.Key)] = append(wantOrder[string(m.Key)], m.ID.String())
		}
	}
	for key, want := range wantOrder {
		if !slices.Equal(keyOrder[key], want) {
			t.Errorf("key %q: events arrived in the order %v, written in the order %v", key, keyOrder[key], want)
		}
	}
}

// A topic no queue is bound to fails its events at once, permanently,
// with the broker's reason in last_error; the others are sent.
func TestRunWithRabbitMQSinkFailsUnroutableEvents(t *testing.T) {
	t.Parallel()
	brokerURL := os.Getenv("OUTBOX_TEST_RABBITMQ_URL")
	if brokerURL == "" {
		brokerURL = rabbitmq.DefaultURL
	}
	ch := rabbitChannel(t, brokerURL)
	queue := "rmqe2e." + uuid.NewString()[:8] + ".ok"
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-expires": int32(600_000)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })

	pool, table := testdb.New(t)
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	writeTx(t, w, pool, []outbox.Message{
		{Topic: queue, Payload: []byte("fine")},
		{Topic: "rmqe2e.no-such-queue." + uuid.NewString()[:8], Payload: []byte("unroutable")},
	}, true)
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema, "OUTBOX_RABBITMQ_URL": brokerURL}
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "rabbitmq", "--poll-interval", "20ms"},
			func(k string) string { return env[k] }, &runOut, &runErr)
	}()
	deadline := time.Now().Add(30 * time.Second)
	var sent, failed int
	var lastError string
	for {
		err := pool.QueryRow(context.Background(), "SELECT count(*) FILTER (WHERE status = 'sent'), count(*) FILTER (WHERE status = 'failed'), "+
			"coalesce(max(last_error) FILTER (WHERE status = 'failed'), '') FROM "+table.Ident()).Scan(&sent, &failed, &lastError)
		if err != nil {
			t.Fatal(err)
		}
		if sent == 1 && failed == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the table; nothing to wait on
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run exit %d; stderr:\n%s", code, syncbuf.Tail(runErr.String(), 4000))
	}
	if sent != 1 || failed != 1 || !strings.Contains(lastError, "no queue bound") {
		t.Errorf("%d sent, %d failed (last_error %q); want 1 sent, 1 failed saying no queue is bound", sent, failed, lastError)
	}
}

// Every bad --rabbitmq-* flag is a usage error naming it, all at once,
// without the password.
func TestRabbitMQFlagsAreChecked(t *testing.T) {
	t.Parallel()
	url := "postgres://postgres@127.0.0.1:1/postgres"
	code, _, stderr := invoke(context.Background(), map[string]string{"OUTBOX_RABBITMQ_URL": "http://guest:hunter2@host/"},
		"run", "--sink", "rabbitmq", "--database-url", url,
		"--rabbitmq-max-in-flight", "0", "--rabbitmq-max-message-bytes", "-1", "--rabbitmq-publish-timeout", "-1s",
		"--rabbitmq-dial-timeout", "0s", "--rabbitmq-exchange", strings.Repeat("x", 300))
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{"--rabbitmq-url (OUTBOX_RABBITMQ_URL)", "--rabbitmq-max-in-flight (OUTBOX_RABBITMQ_MAX_IN_FLIGHT)",
		"--rabbitmq-max-message-bytes", "--rabbitmq-publish-timeout", "--rabbitmq-dial-timeout", "--rabbitmq-exchange (OUTBOX_RABBITMQ_EXCHANGE)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not name %s:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "hunter2") {
		t.Errorf("stderr shows the password:\n%s", stderr)
	}
	code, _, stderr = invoke(context.Background(), nil, "run", "--sink", "rabbitmq", "--database-url", url, "--rabbitmq-tls-insecure-skip-verify")
	if code != 2 || !strings.Contains(stderr, "need an amqps:// --rabbitmq-url") {
		t.Errorf("TLS flags with an amqp:// URL: exit %d, stderr:\n%s", code, stderr)
	}
}

// rabbitChannel opens a channel to the broker at url for the test, failing
// it with how to start one when none answers.
func rabbitChannel(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("no RabbitMQ at the URL in OUTBOX_TEST_RABBITMQ_URL or %s (%v): start one, e.g. `rabbitmq-server -detached` or `docker run -d -p 5672:5672 rabbitmq:3`",
			strings.Replace(rabbitmq.DefaultURL, "guest:guest", "guest:xxxxx", 1), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// getAll takes every message off queue, in order.
func getAll(t *testing.T, ch *amqp.Channel, queue string) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

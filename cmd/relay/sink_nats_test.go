package main

import (
	"bytes"
	"context"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

// relay run --sink nats publishes every committed event to the JetStream
// stream that captures its topic, and no rolled-back one: read back with
// nats.go, each arrives once with its id, payload, key and headers, and
// the keyed events of an --ordered-topics topic arrive in write order.
func TestRunWithNATSSink(t *testing.T) {
	t.Parallel()
	natsURL := os.Getenv("OUTBOX_TEST_NATS_URL")
	if natsURL == "" {
		natsURL = natssink.DefaultURL
	}
	js := natsStream(t, natsURL)
	tag := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	prefix := "relaye2e." + tag
	stream := "RELAYE2E_" + tag
	createNATSStream(t, js, stream, prefix+".>")
	ordered, unordered := prefix+".orders", prefix+".audit"

	pool, table := testdb.New(t)
	env := map[string]string{
		"OUTBOX_DATABASE_URL": testdb.URL(t),
		"OUTBOX_SCHEMA":       table.Schema,
		"OUTBOX_NATS_URL":     natsURL,
		// The local server has no authentication and ignores a token;
		// the relay must not show it.
		"OUTBOX_NATS_TOKEN": "hunter2-token",
	}
	ctx := context.Background()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}

	// Committed: five keys of the ordered topic, ten events each, written
	// interleaved in transactions of several events; events with a binary
	// key, without a key, with headers, on another topic.
	committed := writeKeyRounds(t, w, pool, ordered, 5, 10)
	committed = append(committed, writeTx(t, w, pool, []outbox.Message{
		{Topic: unordered, Key: []byte{0, 0xff, '\n'}, Payload: []byte{1, 2, 3, 0, 255}},
		{Topic: unordered, Payload: []byte("no key")},
		{Topic: unordered, Key: []byte("k"), Payload: []byte("with headers"),
			Headers: map[string]string{"content-type": "application/json", "trace-id": "00-abc-01", "unicode": "ünïcødé ✓"}},
	}, true)...)
	// Rolled back: never published.
	rolledBack := writeTx(t, w, pool, []outbox.Message{
		{Topic: ordered, Key: []byte("customer-0"), Payload: []byte("rolled back")},
		{Topic: unordered, Payload: []byte("rolled back too")},
	}, false)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "nats", "--poll-interval", "20ms", "--batch-size", "16",
			"--ordered-topics", ordered, "--log-format", "json"},
			func(k string) string { return env[k] }, &runOut, &runErr)
	}()
	testdb.AwaitSent(t, pool, table, len(committed), 30*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run exit %d; stderr:\n%s", code, syncbuf.Tail(runErr.String(), 4000))
	}
	if !strings.Contains(runErr.String(), `"msg":"nats sink"`) || !strings.Contains(runErr.String(), `"token":"[REDACTED]"`) {
		t.Errorf("relay run did not log the NATS sink's configuration, token redacted:\n%s", syncbuf.Tail(runErr.String(), 4000))
	}
	if strings.Contains(runErr.String()+runOut.String(), "hunter2") {
		t.Errorf("relay run shows the token:\n%s", syncbuf.Tail(runErr.String(), 4000))
	}

	got := readNATSStream(t, js, stream)
	byID := map[string]jetstream.Msg{}
	var keyOrder = map[string][]string{} // key -> event ids in stream order
	for _, m := range got {
		id := m.Headers().Get(outbox.HeaderEventID)
		if _, dup := byID[id]; dup {
			t.Errorf("event %s arrived twice", id)
		}
		byID[id] = m
		if m.Subject() == ordered {
			key, _ := natssink.Key(m.Headers())
			keyOrder[string(key)] = append(keyOrder[string(key)], id)
		}
	}
	for _, m := range rolledBack {
		if _, ok := byID[m.ID.String()]; ok {
			t.Errorf("rolled-back event %s (%q) arrived", m.ID, m.Payload)
		}
	}
	if len(got) != len(committed) {
		t.Errorf("%d messages arrived for %d committed events", len(got), len(committed))
	}
	wantOrder := map[string][]string{}
	for _, m := range committed {
		r, ok := byID[m.ID.String()]
		if !ok {
			t.Errorf("committed event %s (%q) did not arrive", m.ID, m.Payload)
			continue
		}
		if r.Subject() != m.Topic || !bytes.Equal(r.Data(), m.Payload) {
			t.Errorf("event %s arrived on %s with %q, written to %s with %q", m.ID, r.Subject(), r.Data(), m.Topic, m.Payload)
		}
		h := r.Headers()
		if h.Get(jetstream.MsgIDHeader) != m.ID.String() {
			t.Errorf("event %s: %s is %q", m.ID, jetstream.MsgIDHeader, h.Get(jetstream.MsgIDHeader))
		}
		key, err := natssink.Key(h)
		if err != nil || !bytes.Equal(key, m.Key) || (key == nil) != (m.Key == nil) {
			t.Errorf("event %s: key %q arrived as %q (%v)", m.ID, m.Key, key, err)
		}
		headers := map[string]string{}
		for name, values := range h {
			switch name {
			case outbox.HeaderEventID, jetstream.MsgIDHeader, natssink.HeaderKey, natssink.HeaderKeyBase64:
				continue
			}
			headers[name] = strings.Join(values, ",")
		}
		if len(headers) != len(m.Headers) || !maps.Equal(headers, m.Headers) {
			t.Errorf("event %s: headers %q arrived as %q", m.ID, m.Headers, headers)
		}
		if m.Topic == ordered {
			wantOrder[string(m.Key)] = append(wantOrder[string(m.Key)], m.ID.String())
		}
	}
	for key, want := range wantOrder {
		if strings.Join(keyOrder[key], ",") != strings.Join(want, ",") {
			t.Errorf("key %q: events arrived in the order %v, written in the order %v", key, keyOrder[key], want)
		}
	}
}

// natsStream connects to the NATS server at url for the test, failing it
// with how to start one when none answers.
func natsStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("no NATS server at %s (%v): start one with JetStream, e.g. `nats-server -js -a 127.0.0.1 -p 4222 -sd /tmp/nats`, or set OUTBOX_TEST_NATS_URL", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// createNATSStream creates a stream capturing subjects, deleted when the
// test ends.
func createNATSStream(t *testing.T, js jetstream.JetStream, name string, subjects ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream %s (is JetStream enabled? nats-server -js): %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Errorf("delete stream %s: %v", name, err)
		}
	})
}

// readNATSStream returns every message of the stream in stream order,
// with an ordered consumer.
func readNATSStream(t *testing.T, js jetstream.JetStream, name string) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for uint64(len(out)) < info.State.Msgs {
		batch, err := cons.Fetch(int(info.State.Msgs-uint64(len(out))), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		before := len(out)
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if len(out) == before {
			t.Fatalf("stream %s: %d of %d messages read, then nothing", name, len(out), info.State.Msgs)
		}
	}
	return out
}

// Every bad --nats-* setting is reported at once, as a usage error naming
// the flag and its variable; no secret shows.
func TestNATSSinkFlagErrors(t *testing.T) {
	t.Parallel()
	db := "postgres://postgres@127.0.0.1:1/postgres"
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"bad values", nil, []string{"--nats-url", "http://a:4222,nats://b:99999", "--nats-publish-timeout", "0s", "--nats-max-in-flight", "-3"},
			[]string{"--nats-url (OUTBOX_NATS_URL)", "--nats-publish-timeout (OUTBOX_NATS_PUBLISH_TIMEOUT)", "--nats-max-in-flight (OUTBOX_NATS_MAX_IN_FLIGHT)"}},
		{"empty url", nil, []string{"--nats-url", " , "}, []string{"--nats-url (OUTBOX_NATS_URL) is required"}},
		{"password without user", map[string]string{"OUTBOX_NATS_PASSWORD": "hunter2"}, nil, []string{"--nats-user (OUTBOX_NATS_USER)"}},
		{"two kinds of credentials", map[string]string{"OUTBOX_NATS_TOKEN": "hunter2"}, []string{"--nats-user", "u", "--nats-password", "hunter2"},
			[]string{"--nats-creds (OUTBOX_NATS_CREDS)", "--nats-token (OUTBOX_NATS_TOKEN)"}},
		{"missing credentials file", nil, []string{"--nats-creds", "/nonexistent/user.creds"}, []string{"--nats-creds (OUTBOX_NATS_CREDS)"}},
		{"TLS key without certificate", nil, []string{"--nats-tls-key", "/nonexistent/key.pem"}, []string{"--nats-tls-cert"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"run", "--sink", "nats", "--database-url", db}, c.args...)
			code, _, stderr := invoke(context.Background(), c.env, args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, want := range c.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not mention %q:\n%s", want, stderr)
				}
			}
			if strings.Contains(stderr, "hunter2") {
				t.Errorf("stderr leaks a secret:\n%s", stderr)
			}
		})
	}
}

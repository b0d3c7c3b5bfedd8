package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Two signing secrets, as during a rotation.
const (
	webhookSecretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	webhookSecretB = "whsec_c2Vjb25kLXRlc3Qta2V5LW9mLTMyLWJ5dGVzLWxvbmch"
)

// receiverEnv names the file the receiver process records to; set, it
// makes TestWebhookReceiverProcess the receiver.
const receiverEnv = "OUTBOX_TEST_WEBHOOK_RECEIVER"

// receivedRequest is one request as the receiver process recorded it, one
// JSON line each, written before it answered.
type receivedRequest struct {
	Status int         `json:"status"`
	URI    string      `json:"uri"`
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
	AtNano int64       `json:"at_ns"`
}

// TestWebhookReceiverProcess is not a test of its own: it is the webhook
// receiver that TestRunWithWebhookSink runs as a separate process (this
// test binary again, with receiverEnv set). It serves POSTs on a loopback
// port, prints "listening <addr>" on standard output, appends each request
// to the file as a JSON line before it answers, answers the first request
// for topic cli.flaky 503 with Retry-After: 1 and every other one 204, and
// exits when its standard input closes. Without receiverEnv it returns at
// once.
func TestWebhookReceiverProcess(t *testing.T) {
	path := os.Getenv(receiverEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var mu sync.Mutex
	flakyRefused := false
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		status := http.StatusNoContent
		if r.URL.Path == "/hooks/cli.flaky" && !flakyRefused {
			flakyRefused = true
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "1")
		}
		line, _ := json.Marshal(receivedRequest{Status: status, URI: r.RequestURI, Header: r.Header, Body: body, AtNano: time.Now().UnixNano()})
		if _, err := f.Write(append(line, '\n')); err != nil {
			status = http.StatusInternalServerError // not recorded: not accepted
		}
		w.WriteHeader(status)
	})}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("listening %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it, or dies
	os.Exit(0)
}

// startReceiverProcess starts the receiver process and returns its
// address and the file it records to. It is stopped when t ends.
func startReceiverProcess(t *testing.T) (addr, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "received.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestWebhookReceiverProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), receiverEnv+"="+path)
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				listening <- a
			}
		}
		exited <- cmd.Wait() // after stdout reached EOF, as Wait requires
	}()
	t.Cleanup(func() {
		stdin.Close() // the receiver exits
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case addr = <-listening:
		return addr, path
	case err := <-exited:
		t.Fatalf("the receiver process exited (%v) before listening:\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the receiver process is not listening after 30s:\n%s", stderr.String())
	}
	return "", ""
}

// readReceived reads every request the receiver process recorded.
func readReceived(t *testing.T, path string) []receivedRequest {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []receivedRequest
	for line := range bytes.Lines(b) {
		var r receivedRequest
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// verifyWebhook checks one request's signature under secret, from the
// Standard Webhooks specification: HMAC-SHA256 of "<id>.<timestamp>.<body>"
// under the base64 key after "whsec_", among the space-separated "v1,..."
// signatures.
func verifyWebhook(h http.Header, body []byte, secret string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if b64, ok := strings.CutPrefix(sig, "v1,"); ok {
			if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}

// relay run --sink webhook delivers every committed event, and no
// rolled-back one, to a receiver in another process: ids, topics (in the
// URL), payloads, keys and headers intact, both signatures valid, each key
// of the ordered topics in write order, through a 503 with Retry-After.
func TestRunWithWebhookSink(t *testing.T) {
	t.Parallel()
	addr, path := startReceiverProcess(t)
	pool, table := testdb.NewEmpty(t)
	env := map[string]string{
		"OUTBOX_DATABASE_URL":   testdb.URL(t),
		"OUTBOX_SCHEMA":         table.Schema,
		"OUTBOX_WEBHOOK_SECRET": webhookSecretA + "," + webhookSecretB,
		"OUTBOX_WEBHOOK_HEADER": "Authorization: Bearer tok3n\nX-Source: relay-test",
	}
	ctx := context.Background()
	if code, out, stderr := invoke(ctx, env, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, stderr)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	var committed, rolledBack []outbox.Message
	binaryKey := []byte{0xff, 0x00, 'k', '\n'}
	for i := range 12 {
		key := [][]byte{[]byte("customer-1"), []byte("customer-2"), binaryKey}[i%3]
		committed = append(committed, outbox.Message{Topic: "cli.ordered", Key: key,
			Payload: fmt.Appendf(nil, `{"seq":%d}`, i), Headers: map[string]string{"trace-id": fmt.Sprintf("t-%d", i)}})
	}
	for i := range 3 {
		committed = append(committed, outbox.Message{Topic: "cli.flaky", Key: []byte("flaky"), Payload: fmt.Appendf(nil, `{"flaky":%d}`, i)})
	}
	for i := range 4 {
		committed = append(committed, outbox.Message{Topic: "cli.unordered", Payload: []byte{byte(i), 0x00, 0xfe, '"'}})
	}
	// Half written one by one, half in one committed transaction.
	for i := range committed[:8] {
		res, err := w.Write(ctx, pool, committed[i])
		if err != nil {
			t.Fatal(err)
		}
		committed[i].ID = res.ID
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	results, err := w.WriteBatch(ctx, tx, committed[8:])
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i, res := range results {
		committed[8+i].ID = res.ID
	}
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []outbox.Message{
		{Topic: "cli.ordered", Key: []byte("customer-1"), Payload: []byte(`{"rolled":"back"}`)},
		{Topic: "cli.unordered", Payload: []byte("rolled back")},
	} {
		res, err := w.Write(ctx, tx, m)
		if err != nil {
			t.Fatal(err)
		}
		m.ID = res.ID
		rolledBack = append(rolledBack, m)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "webhook",
			"--webhook-url", "http://" + addr + "/hooks/{topic}",
			"--ordered-topics", "cli.ordered,cli.flaky",
			"--poll-interval", "20ms", "--backoff-min", "50ms", "--log-format", "json"},
			func(k string) string { return env[k] }, &runOut, &runErr)
	}()
	testdb.AwaitSent(t, pool, table, len(committed), 60*time.Second)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, runErr.String())
	}
	logs := runErr.String()
	for _, secret := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "c2Vjb25kLXRlc3Qta2V5", "tok3n"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log shows a secret:\n%s", logs)
		}
	}
	if !strings.Contains(logs, `"msg":"webhook sink"`) {
		t.Errorf("the log does not show the sink's configuration:\n%s", logs)
	}

	reqs := readReceived(t, path)
	accepted := map[string]receivedRequest{} // event id -> its first accepted request
	var order []string                       // event ids in the order they were first accepted
	refused := map[string]receivedRequest{}
	for _, r := range reqs {
		id := r.Header.Get("webhook-id")
		if r.Header.Get("outbox-event-id") != id || r.Header.Get("Idempotency-Key") != `"`+id+`"` {
			t.Errorf("request %s: outbox-event-id %q, Idempotency-Key %q, webhook-id %q differ", r.URI, r.Header.Get("outbox-event-id"), r.Header.Get("Idempotency-Key"), id)
		}
		for i, secret := range []string{webhookSecretA, webhookSecretB} {
			if !verifyWebhook(r.Header, r.Body, secret) {
				t.Errorf("event %s: no valid signature under secret %d: %q", id, i+1, r.Header.Get("webhook-signature"))
			}
		}
		if r.Header.Get("Authorization") != "Bearer tok3n" || r.Header.Get("X-Source") != "relay-test" {
			t.Errorf("event %s: the --webhook-header headers are missing: %v", id, r.Header)
		}
		if r.Status >= 300 {
			refused[id] = r
			continue
		}
		if _, dup := accepted[id]; !dup {
			accepted[id] = r
			order = append(order, id)
		}
	}
	for _, m := range rolledBack {
		for _, r := range reqs {
			if r.Header.Get("webhook-id") == m.ID.String() {
				t.Errorf("the rolled-back event %s (%s) arrived", m.ID, m.Payload)
			}
		}
	}
	for _, m := range committed {
		r, ok := accepted[m.ID.String()]
		if !ok {
			t.Errorf("event %s (%s, %s) did not arrive", m.ID, m.Topic, m.Payload)
			continue
		}
		if want := "/hooks/" + m.Topic; r.URI != want || r.Header.Get("Outbox-Topic") != m.Topic {
			t.Errorf("event %s: arrived at %s with Outbox-Topic %q, want %s", m.ID, r.URI, r.Header.Get("Outbox-Topic"), want)
		}
		if !bytes.Equal(r.Body, m.Payload) {
			t.Errorf("event %s: payload %q arrived as %q", m.ID, m.Payload, r.Body)
		}
		if got := receivedKey(t, r.Header); !bytes.Equal(got, m.Key) || (got == nil) != (m.Key == nil) {
			t.Errorf("event %s: key %q arrived as %q", m.ID, m.Key, got)
		}
		headers := map[string]string{}
		for name, values := range r.Header {
			if rest, ok := strings.CutPrefix(name, "Outbox-Header-"); ok {
				headers[strings.ToLower(rest)] = values[0]
			}
		}
		if !maps.Equal(headers, m.Headers) {
			t.Errorf("event %s: headers %v arrived as %v", m.ID, m.Headers, headers)
		}
	}
	// Each key of the ordered topics in write order, through the retry.
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	last := map[string]int{}
	for _, m := range committed {
		if m.Topic == "cli.unordered" {
			continue
		}
		k := m.Topic + "/" + string(m.Key)
		if p, seen := last[k]; seen && pos[m.ID.String()] < p {
			t.Errorf("key %q of %s: event %s (%s) arrived before an earlier one", m.Key, m.Topic, m.ID, m.Payload)
		}
		last[k] = pos[m.ID.String()]
	}
	flaky := committed[12] // the first of cli.flaky, refused once
	first, ok := refused[flaky.ID.String()]
	if !ok || len(refused) != 1 {
		t.Fatalf("refused requests: %v; want one, of event %s", slices.Collect(maps.Keys(refused)), flaky.ID)
	}
	if wait := time.Duration(accepted[flaky.ID.String()].AtNano - first.AtNano); wait < time.Second {
		t.Errorf("event %s was sent again %v after a 503 with Retry-After: 1", flaky.ID, wait)
	}
}

// receivedKey decodes a request's key: Outbox-Key, or Outbox-Key-Base64,
// or nil.
func receivedKey(t *testing.T, h http.Header) []byte {
	t.Helper()
	if v := h.Get("Outbox-Key-Base64"); v != "" {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			t.Errorf("Outbox-Key-Base64 %q: %v", v, err)
		}
		return b
	}
	if v, ok := h["Outbox-Key"]; ok {
		return []byte(v[0])
	}
	return nil
}

// Every bad --webhook-* flag is a usage error naming the flag; none
// quotes a secret or a header value.
func TestWebhookFlagsAreChecked(t *testing.T) {
	t.Parallel()
	url := "postgres://postgres@127.0.0.1:1/postgres"
	base := []string{"run", "--sink", "webhook", "--database-url", url}
	ok := "--webhook-url=https://hooks.example.com/{topic}"
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"missing url", nil, nil, []string{"--webhook-url (OUTBOX_WEBHOOK_URL) is required"}},
		{"topic in the host", nil, []string{"--webhook-url", "https://{topic}.example.com/"}, []string{"--webhook-url (OUTBOX_WEBHOOK_URL)", "only in the path or the query"}},
		{"password in a bad url", nil, []string{"--webhook-url", "ftp://u:hunter2@h/{topic}"}, []string{"--webhook-url (OUTBOX_WEBHOOK_URL)", "[REDACTED]"}},
		{"bad secret", map[string]string{"OUTBOX_WEBHOOK_SECRET": "hunter2hunter2hunter2hunter2"}, []string{ok}, []string{"--webhook-secret (OUTBOX_WEBHOOK_SECRET)", "whsec_"}},
		{"short secret", nil, []string{ok, "--webhook-secret", "whsec_aHVudGVyMg=="}, []string{"--webhook-secret (OUTBOX_WEBHOOK_SECRET)", "at least 24"}},
		{"zero timeout", nil, []string{ok, "--webhook-timeout", "0s"}, []string{"--webhook-timeout (OUTBOX_WEBHOOK_TIMEOUT)"}},
		{"zero in flight", nil, []string{ok, "--webhook-max-in-flight", "0"}, []string{"--webhook-max-in-flight (OUTBOX_WEBHOOK_MAX_IN_FLIGHT)"}},
		{"bad content type", nil, []string{ok, "--webhook-content-type", "json"}, []string{"--webhook-content-type (OUTBOX_WEBHOOK_CONTENT_TYPE)"}},
		{"header without colon", nil, []string{ok, "--webhook-header", "Authorization Bearer hunter2"}, []string{"--webhook-header (OUTBOX_WEBHOOK_HEADER)"}},
		{"reserved header", nil, []string{ok, "--webhook-header", "Content-Type: text/plain"}, []string{"--webhook-header (OUTBOX_WEBHOOK_HEADER)"}},
		{"header twice", map[string]string{"OUTBOX_WEBHOOK_HEADER": "X-A: hunter2\nX-A: 2"}, []string{ok}, []string{"--webhook-header (OUTBOX_WEBHOOK_HEADER)", "twice"}},
		{"bad probe url", nil, []string{ok, "--webhook-probe-url", "/health"}, []string{"--webhook-probe-url (OUTBOX_WEBHOOK_PROBE_URL)"}},
		{"key without cert", nil, []string{ok, "--webhook-tls-key", "/nonexistent.pem"}, []string{"--webhook-tls-cert"}},
		{"every problem at once", nil, []string{"--webhook-timeout", "-1s", "--webhook-max-in-flight", "-3"},
			[]string{"--webhook-url (OUTBOX_WEBHOOK_URL)", "--webhook-timeout (OUTBOX_WEBHOOK_TIMEOUT)", "--webhook-max-in-flight (OUTBOX_WEBHOOK_MAX_IN_FLIGHT)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := invoke(context.Background(), c.env, append(slices.Clone(base), c.args...)...)
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

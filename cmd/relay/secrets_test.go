package main

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

// No listener of relay run serves a secret. The built binary runs with a
// secret of its own in every flag that takes one, routing a topic to each
// sink; once every sink has been used, every endpoint of --metrics-addr
// and of --pprof-addr (each one the profile index links to, in text and in
// its binary form, the command line, a CPU profile and an execution
// trace) is read and searched for each secret; so are the log and the
// rows' last_error. NATS takes a password or a token, not both: one run
// each, the second with a password in the URL too.
func TestNoSecretOnAnyListener(t *testing.T) {
	t.Parallel()
	for _, natsAuth := range []string{"password", "token"} {
		t.Run("nats "+natsAuth, func(t *testing.T) {
			t.Parallel()
			noSecretOnAnyListener(t, natsAuth)
		})
	}
}

func noSecretOnAnyListener(t *testing.T, natsAuth string) {
	pool, table := testdb.New(t)
	ctx := context.Background()
	tag := uuid.NewString()[:8]
	// secret returns a secret that appears nowhere else, and records it.
	secrets := map[string]string{} // what -> secret
	secret := func(what string) string {
		s := "s3cr3t-" + strings.ReplaceAll(what, " ", "-") + "-" + tag
		secrets[what] = s
		return s
	}
	topic := func(sink string) string { return sink + "." + tag }

	dbURL, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	dbURL.User = url.UserPassword(dbURL.User.Username(), secret("database password")) // trust auth: any password
	q := dbURL.Query()
	q.Set("sslpassword", secret("database sslpassword"))
	dbURL.RawQuery = q.Encode()

	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic("kafka")},
		Users: []kfakebroker.User{{Name: "relay", Password: secret("kafka sasl password")}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.Close)

	natsURL := os.Getenv("OUTBOX_TEST_NATS_URL")
	if natsURL == "" {
		natsURL = natssink.DefaultURL
	}
	createNATSStream(t, natsStream(t, natsURL), "SECRETS_"+tag, topic("nats"))
	// The server has no auth: it takes any.
	natsArgs := []string{"--nats-url", natsURL, "--nats-user", "relay", "--nats-password", secret("nats password")}
	if natsAuth == "token" {
		u, err := url.Parse(natsURL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword("relay", secret("nats url password"))
		natsArgs = []string{"--nats-url", u.String(), "--nats-token", secret("nats token")}
	}

	// The RabbitMQ user is guest: its password is refused, and the sink's
	// errors are searched too.
	rabbitURL, err := url.Parse(cmp.Or(os.Getenv("OUTBOX_TEST_RABBITMQ_URL"), rabbitmq.DefaultURL))
	if err != nil {
		t.Fatal(err)
	}
	rabbitURL.User = url.UserPassword(rabbitURL.User.Username(), secret("rabbitmq password"))

	redisAddr := redisTestAddr(t) // no password: AUTH takes any
	prefix := "secrets-" + tag + ":"
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer c.Close()
		c.Del(context.Background(), prefix+topic("redis"))
	})

	signingKey := []byte("webhook-signing-key-" + tag + "-0123456789")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(signingKey)
	secrets["webhook secret"], secrets["webhook signing key"], secrets["webhook secret base64"] = whsec, string(signingKey), strings.TrimPrefix(whsec, "whsec_")
	header := secret("webhook header")
	var (
		mu       sync.Mutex
		received []*http.Request
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	hookURL := func(what, path string) string {
		u, _ := url.Parse(hook.URL + path)
		u.User = url.UserPassword("relay", secret(what))
		return u.String()
	}

	args := []string{"run", "--database-url", dbURL.String(), "--schema", table.Schema, "--log-format", "json", "--poll-interval", "50ms",
		"--metrics-addr", "127.0.0.1:0", "--pprof-addr", "127.0.0.1:0",
		"--route", "kafka.*=kafka", "--route", "nats.*=nats", "--route", "rabbitmq.*=rabbitmq", "--route", "redis.*=redis", "--route", "webhook.*=webhook",
		"--kafka-brokers", strings.Join(br.Addrs(), ","), "--kafka-sasl-mechanism", "plain", "--kafka-sasl-username", "relay", "--kafka-sasl-password", secrets["kafka sasl password"],
		"--rabbitmq-url", rabbitURL.String(),
		"--redis-url", "redis://:" + secret("redis url password") + "@" + redisAddr + "/0", "--redis-password", secret("redis password"), "--redis-stream-prefix", prefix,
		"--webhook-url", hookURL("webhook url password", "/in/{topic}"), "--webhook-probe-url", hookURL("webhook probe url password", "/health"),
		"--webhook-secret", whsec, "--webhook-header", "Authorization: Bearer " + header,
	}
	p := startRelay(t, nil, append(args, natsArgs...)...)
	metricsAt, pprofAt := loggedAddr(t, p, "serving metrics and health checks"), loggedAddr(t, p, "serving profiles")

	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	sinks := []string{"kafka", "nats", "rabbitmq", "redis", "webhook"}
	for _, s := range sinks {
		if _, err := w.Write(ctx, pool, outbox.Message{Topic: topic(s), Payload: []byte(`{"sink":"` + s + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// Every sink but RabbitMQ delivers its event; RabbitMQ refuses the
	// password, and its failures are counted.
	awaitCond(t, p, 60*time.Second, "every sink used", func() bool {
		var sent int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status = 'sent' AND topic <> $1", topic("rabbitmq")).Scan(&sent); err != nil {
			t.Fatal(err)
		}
		for k, v := range scrape(t, metricsAt) {
			if sent == len(sinks)-1 && strings.HasPrefix(k, "outbox_sink_messages_total{") && strings.Contains(k, `sink="rabbitmq"`) && !strings.Contains(k, `result="acknowledged"`) && v > 0 {
				return true
			}
		}
		return false
	})
	mu.Lock()
	posted := slices.ContainsFunc(received, func(r *http.Request) bool {
		return r.Method == http.MethodPost && r.Header.Get("Authorization") == "Bearer "+header && r.Header.Get("Webhook-Signature") != ""
	})
	mu.Unlock()
	if !posted {
		t.Errorf("the webhook endpoint got no POST with the header and the signature the flags ask for")
	}

	// Every endpoint of both listeners. A path fetched again keeps every
	// answer.
	fetched := map[string][]byte{}
	fetch := func(base, path string, want int) (status int, _ []byte) {
		t.Helper()
		resp, err := http.Get("http://" + base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if want != 0 && resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil { // the profiles in their binary form
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		key := path
		if _, again := fetched[key]; again {
			key = fmt.Sprintf("%s (answer %d)", path, len(fetched))
		}
		fetched[key] = body
		return resp.StatusCode, body
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		fetch(metricsAt, path, http.StatusOK)
	}
	// /readyz: the relay, the database and the schema are ready, and the
	// sink is ready or in an outage: the RabbitMQ route refuses the
	// password, and each time its event is retried alone the relay pauses
	// (a 503 with the sink's error; on a loaded machine for minutes on
	// end). Every answer is searched, the 503s too.
	awaitCond(t, p, time.Minute, "/readyz says relay, database and schema ok", func() bool {
		status, body := fetch(metricsAt, "/readyz", 0)
		return (status == http.StatusOK || status == http.StatusServiceUnavailable) &&
			bytes.HasPrefix(body, []byte("relay: ok\ndatabase: ok\nschema: ok\nsink: "))
	})
	fetch(pprofAt, "/debug/pprof/", http.StatusOK)
	paths := map[string]bool{}
	for _, m := range regexp.MustCompile(`href=['"]([^'"]+)['"]`).FindAllStringSubmatch(string(fetched["/debug/pprof/"]), -1) {
		name, _, _ := strings.Cut(m[1], "?")
		paths[m[1]], paths[name] = true, true
	}
	for _, want := range []string{"cmdline", "goroutine?debug=2", "heap", "trace"} {
		if !paths[want] {
			t.Fatalf("the profile index links no %s:\n%s", want, fetched["/debug/pprof/"])
		}
	}
	for path := range paths {
		switch name, _, _ := strings.Cut(path, "?"); name {
		case "profile", "trace": // 30 s by default
			path = name + "?seconds=1"
		}
		want := http.StatusOK
		if strings.HasPrefix(path, "cmdline") {
			want = 0 // not served: whatever it answers is searched
		}
		fetch(pprofAt, "/debug/pprof/"+path, want)
	}
	if !bytes.Contains(fetched["/debug/pprof/goroutine?debug=2"], []byte("goroutine ")) {
		t.Errorf("goroutine?debug=2 has no stacks:\n%s", fetched["/debug/pprof/goroutine?debug=2"])
	}

	var lastErrors string
	if err := pool.QueryRow(ctx, "SELECT coalesce(string_agg(last_error, E'\\n'), '') FROM "+table.Ident()).Scan(&lastErrors); err != nil {
		t.Fatal(err)
	}
	fetched["the log"], fetched["last_error"] = []byte(p.stderr.String()), []byte(lastErrors)
	for path, body := range fetched {
		for what, s := range secrets {
			if bytes.Contains(body, []byte(s)) {
				t.Errorf("%s shows the %s", path, what)
			}
		}
	}
}

// loggedAddr waits for the JSON log line msg of the relay p and returns
// its address.
func loggedAddr(t *testing.T, p *relayProc, msg string) string {
	t.Helper()
	var addr string
	awaitCond(t, p, 30*time.Second, msg, func() bool {
		for line := range strings.SplitSeq(p.stderr.String(), "\n") {
			var l struct{ Msg, Address string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
				addr = l.Address
				return true
			}
		}
		return false
	})
	return addr
}

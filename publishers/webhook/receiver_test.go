package webhook_test

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/publisherstest"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// receiver is a webhook receiver on loopback TCP (an httptest.Server),
// optionally behind a fault proxy. It accepts POSTs to /hooks/<topic>,
// answers 410 Gone to the topics that start with "gone-", verifies the
// signatures when it was given secrets, and records each request it
// accepted (answered 2xx) before answering, in arrival order per topic.
type receiver struct {
	t       *testing.T
	srv     *httptest.Server
	proxy   *faultproxy.Proxy // nil unless started with withProxy
	secrets []string          // expected signing secrets; none: no signature expected

	// answer, when set, sees every request first (after its body was
	// read); when it returns true it has answered, and the request is not
	// accepted.
	answer func(w http.ResponseWriter, d *delivery) bool

	mu       sync.Mutex
	accepted map[string][]delivery // by topic, in arrival order
	arrived  atomic.Int64          // every request, accepted or not
}

// delivery is one request as the receiver read it.
type delivery struct {
	URI    string // the request target, path and query
	Topic  string
	Header http.Header
	Body   []byte
	At     time.Time
}

type receiverOption func(*receiver)

// withProxy puts a fault proxy in front of the receiver: URL and Addr
// point at the proxy.
func withProxy() receiverOption {
	return func(r *receiver) {
		p, err := faultproxy.Start(r.srv.Listener.Addr().String())
		if err != nil {
			r.t.Fatal(err)
		}
		r.proxy = p
	}
}

// withSecrets makes the receiver verify every request's signature against
// each of secrets (the independent verifier of verify_test.go).
func withSecrets(secrets ...string) receiverOption {
	return func(r *receiver) { r.secrets = secrets }
}

// withAnswer sets receiver.answer.
func withAnswer(f func(w http.ResponseWriter, d *delivery) bool) receiverOption {
	return func(r *receiver) { r.answer = f }
}

// startReceiver starts a receiver, closed when t ends.
func startReceiver(t *testing.T, opts ...receiverOption) *receiver {
	t.Helper()
	r := &receiver{t: t, accepted: map[string][]delivery{}}
	r.srv = httptest.NewServer(r)
	for _, o := range opts {
		o(r)
	}
	t.Cleanup(func() {
		if r.proxy != nil {
			r.proxy.Close()
		}
		r.srv.CloseClientConnections() // a stalled request's handler must not hold Close up
		r.srv.Close()
	})
	return r
}

// Addr is the host:port publishers dial.
func (r *receiver) Addr() string {
	if r.proxy != nil {
		return r.proxy.Addr()
	}
	return r.srv.Listener.Addr().String()
}

// URL is the URL template of the receiver: http://<addr>/hooks/{topic}.
func (r *receiver) URL() string { return "http://" + r.Addr() + "/hooks/" + webhook.TopicPlaceholder }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.arrived.Add(1)
	topic, ok := strings.CutPrefix(req.URL.Path, "/hooks/")
	if req.Method != http.MethodPost || !ok {
		http.Error(w, "POST /hooks/<topic> only", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the connection broke: nothing was accepted
	}
	d := &delivery{URI: req.RequestURI, Topic: topic, Header: req.Header.Clone(), Body: body, At: time.Now()}
	if strings.HasPrefix(topic, "gone-") {
		http.Error(w, "this topic is gone", http.StatusGone)
		return
	}
	if r.answer != nil && r.answer(w, d) {
		return
	}
	for _, secret := range r.secrets {
		if err := verifySignature(d.Header, d.Body, secret, time.Now()); err != nil {
			r.t.Errorf("topic %s, event %s: signature with secret %d: %v", topic, d.Header.Get(webhook.HeaderWebhookID), slicesIndex(r.secrets, secret), err)
		}
	}
	// Recorded before the answer: a 2xx means stored.
	r.mu.Lock()
	r.accepted[topic] = append(r.accepted[topic], *d)
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// deliveries returns the requests accepted for topic so far, in arrival
// order.
func (r *receiver) deliveries(topic string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.accepted[topic]...)
}

// records returns what arrived at topic as the conformance suite's
// records: one stream per key, the key and headers decoded as a consumer
// would decode them. It fails t on a request whose Standard Webhooks,
// topic or id headers disagree.
func (r *receiver) records(t *testing.T, topic string) []publisherstest.Record {
	t.Helper()
	ds := r.deliveries(topic)
	out := make([]publisherstest.Record, len(ds))
	for i, d := range ds {
		out[i] = toRecord(t, d)
	}
	return out
}

// toRecord decodes a delivery as a consumer would.
func toRecord(t *testing.T, d delivery) publisherstest.Record {
	t.Helper()
	h := d.Header
	rec := publisherstest.Record{Topic: d.Topic, Value: d.Body, EventID: h.Get(webhook.HeaderEventID), Headers: map[string]string{}}
	if rec.EventID != "" {
		rec.Headers[outbox.HeaderEventID] = rec.EventID
	}
	for name, want := range map[string]string{
		webhook.HeaderWebhookID: rec.EventID,
		"Idempotency-Key":       `"` + rec.EventID + `"`,
		webhook.HeaderTopic:     d.Topic,
		"Content-Type":          webhook.DefaultContentType,
	} {
		if got := h.Get(name); got != want {
			t.Errorf("event %s: header %s is %q, want %q", rec.EventID, name, got, want)
		}
	}
	if ts, err := strconv.ParseInt(h.Get(webhook.HeaderWebhookTimestamp), 10, 64); err != nil || absDuration(time.Since(time.Unix(ts, 0))) > time.Minute {
		t.Errorf("event %s: webhook-timestamp %q is not the time of the request in Unix seconds", rec.EventID, h.Get(webhook.HeaderWebhookTimestamp))
	}
	if v := h.Values(webhook.HeaderKeyBase64); len(v) > 0 {
		key, err := base64.StdEncoding.DecodeString(v[0])
		if err != nil {
			t.Errorf("event %s: %s %q: %v", rec.EventID, webhook.HeaderKeyBase64, v[0], err)
		}
		rec.Key = append([]byte{}, key...) // not nil when empty
	} else if v, ok := h[http.CanonicalHeaderKey(webhook.HeaderKey)]; ok {
		rec.Key = []byte(v[0])
	}
	if rec.Key != nil {
		rec.Stream = "key:" + string(rec.Key)
	}
	for name, values := range h {
		if rest, ok := strings.CutPrefix(name, webhook.HeaderPrefix); ok {
			// Go's server writes names in canonical case; the suite's
			// headers are lower case, and HTTP names are case-insensitive.
			rec.Headers[strings.ToLower(rest)] = values[0]
		}
	}
	return rec
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

var topicSeq atomic.Int64

// topicName returns a topic unique within the test binary.
func topicName(prefix string) string {
	return prefix + "-" + strconv.FormatInt(topicSeq.Add(1), 10)
}

// newPublisher returns a publisher for cfg, closed when t ends.
func newPublisher(t testing.TB, cfg webhook.Config) *webhook.Publisher {
	t.Helper()
	p, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// bodies returns the bodies of ds, in order, as strings.
func bodies(ds []delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(bytes.Clone(d.Body))
	}
	return out
}

package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// The request carries the payload exactly, the content type, the static
// headers, the key (as text, or base64 when it is not printable ASCII, an
// empty key as an empty value) and each message header under the prefix.
func TestRequestHeaders(t *testing.T) {
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	t.Parallel()
	r := startReceiver(t)
	p := newPublisher(t, webhook.Config{
		URL:         r.URL(),
		ContentType: "application/cloudevents+json; charset=utf-8",
		Headers:     map[string]string{"Authorization": "Bearer s3cr3t", "x-tenant": "acme"},
	})
	topic := topicName("headers")
	msgs := []outbox.Message{
		msg(topic, "order-1", `{"a":1}`),
		msg(topic, " padded", "key with a leading space"),
		msg(topic, "", "no key"),
		{Topic: topic, Key: []byte{}, Payload: []byte("empty key")},
		{Topic: topic, Key: []byte("k"), Payload: []byte("headers"), Headers: map[string]string{"Trace-Id": "00-ab-01", "x_lower.case": "v", "empty": ""}},
		{Topic: topic, Payload: []byte("traced"), Headers: map[string]string{"traceparent": traceparent, "tracestate": "vendor=1"}},
	}
	for i := range msgs {
		msgs[i].ID = uuid.New()
	}
	if err := p.Publish(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	got := map[string]delivery{}
	for _, d := range r.deliveries(topic) {
		got[string(d.Body)] = d
	}
	for _, m := range msgs {
		d, ok := got[string(m.Payload)]
		if !ok {
			t.Fatalf("%q did not arrive", m.Payload)
		}
		h := d.Header
		if ct := h.Get("Content-Type"); ct != "application/cloudevents+json; charset=utf-8" {
			t.Errorf("%q: Content-Type %q", m.Payload, ct)
		}
		if h.Get("Authorization") != "Bearer s3cr3t" || h.Get("X-Tenant") != "acme" {
			t.Errorf("%q: static headers missing: %v", m.Payload, h)
		}
		if h.Get(webhook.HeaderWebhookID) != m.ID.String() || h.Get(webhook.HeaderEventID) != m.ID.String() {
			t.Errorf("%q: webhook-id %q, outbox-event-id %q, want %s", m.Payload, h.Get(webhook.HeaderWebhookID), h.Get(webhook.HeaderEventID), m.ID)
		}
		if h.Get(webhook.HeaderWebhookSignature) != "" {
			t.Errorf("%q: signed without secrets", m.Payload)
		}
	}
	keyOf := func(payload string) (text []string, b64 []string) {
		h := got[payload].Header
		return h.Values(webhook.HeaderKey), h.Values(webhook.HeaderKeyBase64)
	}
	for payload, want := range map[string][2]string{
		`{"a":1}`:                  {"order-1", ""},
		"key with a leading space": {"", "IHBhZGRlZA=="},
		"empty key":                {"", ""},
	} {
		text, b64 := keyOf(payload)
		switch {
		case want[0] != "" && (len(text) != 1 || text[0] != want[0] || len(b64) != 0),
			want[1] != "" && (len(b64) != 1 || b64[0] != want[1] || len(text) != 0):
			t.Errorf("%q: key headers %q / %q, want %q", payload, text, b64, want)
		}
	}
	if text, b64 := keyOf("no key"); len(text)+len(b64) != 0 {
		t.Errorf("no key: key headers %q / %q", text, b64)
	}
	if text, b64 := keyOf("empty key"); len(text) != 1 || text[0] != "" || len(b64) != 0 {
		t.Errorf("empty key: key headers %q / %q, want one empty Outbox-Key", text, b64)
	}
	h := got["headers"].Header
	for name, want := range map[string]string{"Outbox-Header-Trace-Id": "00-ab-01", "Outbox-Header-X_lower.case": "v", "Outbox-Header-Empty": ""} {
		if v, ok := h[name]; !ok || v[0] != want {
			t.Errorf("header %s = %q (present %t), want %q", name, v, ok, want)
		}
	}
	if v := h.Values("Traceparent"); len(v) != 0 {
		t.Errorf("Traceparent %q without a traceparent header in the message", v)
	}
	// The W3C trace context travels under its own names too, so that the
	// receiver's HTTP tracing middleware finds it.
	h = got["traced"].Header
	for name, want := range map[string]string{"Traceparent": traceparent, "Tracestate": "vendor=1", "Outbox-Header-Traceparent": traceparent, "Outbox-Header-Tracestate": "vendor=1"} {
		if v := h.Values(name); len(v) != 1 || v[0] != want {
			t.Errorf("traced: header %s = %q, want %q", name, v, want)
		}
	}
}

// A message that cannot travel intact fails permanently with
// ErrInvalidMessage, unsent, without holding up the rest of its key.
func TestInvalidMessagesArePermanent(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	p := newPublisher(t, webhook.Config{URL: r.URL()})
	topic := topicName("invalid")
	bad := []outbox.Message{
		{Topic: "bad topic", Payload: []byte("invalid topic")},
		{Topic: topic, Key: []byte("k"), Payload: []byte("name not a token"), Headers: map[string]string{"a(b)": "v"}},
		{Topic: topic, Key: []byte("k"), Payload: []byte("value with a newline"), Headers: map[string]string{"h": "a\nb"}},
		{Topic: topic, Key: []byte("k"), Payload: []byte("value with a leading space"), Headers: map[string]string{"h": " a"}},
		{Topic: topic, Key: []byte("k"), Payload: []byte("names differing in case"), Headers: map[string]string{"h": "1", "H": "2"}},
	}
	good := msg(topic, "k", "after them, same key")
	msgs := append(bad, good)
	for i := range msgs {
		msgs[i].ID = uuid.New()
	}
	errs := publish(t, p, msgs)
	for i, err := range errs[:len(bad)] {
		if publishers.ClassOf(err).String() != "permanent" || !errors.Is(err, webhook.ErrInvalidMessage) {
			t.Errorf("%q: %s (%v), want permanent wrapping ErrInvalidMessage", msgs[i].Payload, publishers.ClassOf(err).String(), err)
		}
	}
	if err := errs[len(bad)]; err != nil {
		t.Errorf("the valid message after them: %v", err)
	}
	if got := bodies(r.deliveries(topic)); len(got) != 1 || got[0] != "after them, same key" {
		t.Errorf("arrived: %q, want only the valid message", got)
	}
}

// The topic goes into the path, or the query, escaped there; every topic
// goes to the URL's host.
func TestURLTemplate(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	for _, c := range []struct{ template, topic, want string }{
		{"/hooks/{topic}", "orders.created", "/hooks/orders.created"},
		{"/hooks/{topic}?source=relay", "a_b-C.9", "/hooks/a_b-C.9?source=relay"},
		{"/hooks/all?topic={topic}&v=1", "orders.paid", "/hooks/all?topic=orders.paid&v=1"},
		{"/hooks/{topic}/{topic}", "x", "/hooks/x/x"},
	} {
		p := newPublisher(t, webhook.Config{URL: "http://" + r.Addr() + c.template})
		if err := p.Publish(t.Context(), []outbox.Message{msg(c.topic, "", c.template)}); err != nil {
			t.Fatalf("%s: %v", c.template, err)
		}
	}
	seen := map[string]bool{}
	for _, topic := range []string{"orders.created", "a_b-C.9", "all", "x/x"} {
		for _, d := range r.deliveries(topic) {
			seen[d.URI] = true
		}
	}
	for _, want := range []string{"/hooks/orders.created", "/hooks/a_b-C.9?source=relay", "/hooks/all?topic=orders.paid&v=1", "/hooks/x/x"} {
		if !seen[want] {
			t.Errorf("no request to %s; got %v", want, seen)
		}
	}
}

// With two secrets every request carries two v1 signatures, each valid
// under its own secret alone (checked by the independent verifier), none
// under another; the webhook-id is the event id on every attempt, and the
// timestamp is the attempt's.
func TestSignaturesForRotation(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	p := newPublisher(t, webhook.Config{URL: r.URL(), Secrets: []string{testSecret, testSecretOld}})
	topic := topicName("signed")
	m := msg(topic, "k", `{"type":"order.created"}`)
	for range 2 { // a retry of the same event
		if err := p.Publish(t.Context(), []outbox.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	ds := r.deliveries(topic)
	if len(ds) != 2 {
		t.Fatalf("%d deliveries, want 2", len(ds))
	}
	for i, d := range ds {
		h := d.Header
		if h.Get("webhook-id") != m.ID.String() {
			t.Errorf("attempt %d: webhook-id %q, want the event id %s", i+1, h.Get("webhook-id"), m.ID)
		}
		sigs := strings.Split(h.Get("webhook-signature"), " ")
		if len(sigs) != 2 {
			t.Fatalf("attempt %d: webhook-signature %q, want two signatures", i+1, h.Get("webhook-signature"))
		}
		for j, secret := range []string{testSecret, testSecretOld} {
			one := h.Clone()
			one.Set("webhook-signature", sigs[j])
			if err := verifySignature(one, d.Body, secret, time.Now()); err != nil {
				t.Errorf("attempt %d: signature %d under secret %d: %v", i+1, j+1, j+1, err)
			}
			other := h.Clone()
			other.Set("webhook-signature", sigs[1-j])
			if err := verifySignature(other, d.Body, secret, time.Now()); err == nil {
				t.Errorf("attempt %d: signature %d verifies under the other secret", i+1, 2-j)
			}
		}
		if err := verifySignature(h, d.Body, "whsec_"+strings.Repeat("QUFB", 8), time.Now()); err == nil {
			t.Errorf("attempt %d: verifies under a secret it was not signed with", i+1)
		}
		tampered := append([]byte{}, d.Body...)
		tampered[0] = '['
		if err := verifySignature(h, tampered, testSecret, time.Now()); err == nil {
			t.Errorf("attempt %d: verifies with another body", i+1)
		}
	}
}

// Without secrets a request has webhook-id and webhook-timestamp but no
// signature header.
func TestUnsignedRequests(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, withAnswer(func(w http.ResponseWriter, d *delivery) bool {
		if _, ok := d.Header["Webhook-Signature"]; ok {
			t.Errorf("webhook-signature sent without secrets")
		}
		return false
	}))
	p := newPublisher(t, webhook.Config{URL: r.URL()})
	topic := topicName("unsigned")
	if err := p.Publish(t.Context(), []outbox.Message{msg(topic, "k", "x")}); err != nil {
		t.Fatal(err)
	}
	recs := r.records(t, topic) // checks webhook-id and webhook-timestamp
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
}

package webhook_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/webhook"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	sink "github.com/outboxrelay/outboxrelay/publishers/webhook"
)

var (
	oldSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("the old key, of 32 bytes or so.."))
	newSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("the new key, of 32 bytes or so.."))
)

// captured is a process function that records the messages it is given
// and answers what answer says.
type captured struct {
	mu     sync.Mutex
	msgs   []inbox.Message
	answer func(m inbox.Message) (bool, error)
}

func (c *captured) process(_ context.Context, m inbox.Message) (bool, error) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
	if c.answer == nil {
		return false, nil
	}
	return c.answer(m)
}

func (c *captured) got() []inbox.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]inbox.Message(nil), c.msgs...)
}

// serve starts an httptest server running the Handler of cfg and c,
// closed when t ends.
func serve(t *testing.T, cfg webhook.Config, c *captured) *httptest.Server {
	t.Helper()
	h, err := webhook.NewHandler(cfg, c.process)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// publish sends msgs through the relay's webhook sink to url, signed with
// secrets, and returns each message's error.
func publish(t *testing.T, url string, secrets []string, msgs ...outbox.Message) []error {
	t.Helper()
	p, err := sink.New(sink.Config{URL: url, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return publishers.PerMessage(p.Publish(ctx, msgs), len(msgs))
}

// The messages the handler passes on are those the sink sent: id, topic,
// key (text, binary, empty and none told apart), headers with their names
// in lower case, and payload.
func TestMessagesFromTheSink(t *testing.T) {
	t.Parallel()
	c := &captured{}
	srv := serve(t, webhook.Config{Secrets: []string{newSecret}}, c)
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sent := []outbox.Message{
		{Key: []byte("customer-42"), Payload: []byte(`{"order":1}`), Headers: map[string]string{
			outbox.HeaderTraceparent: traceparent, outbox.HeaderTracestate: "vendor=opaque", "tenant": "acme"}},
		{Key: []byte{0xff, 0x00, 0xfe, 'k'}, Payload: []byte{0x00, 0x01, 0xff}, Headers: map[string]string{"Region-Code": "EU"}},
		{Key: []byte{}, Payload: []byte(`{"order":3}`)},
		{Payload: []byte{}},
	}
	for i := range sent {
		sent[i].ID, sent[i].Topic, sent[i].Attempt = uuid.New(), "orders.created", 1
	}
	// The sink signs with both secrets while rotating; the handler knows
	// the new one only.
	for i, err := range publish(t, srv.URL+"/hooks/{topic}", []string{oldSecret, newSecret}, sent...) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	byID := map[uuid.UUID]inbox.Message{}
	for _, m := range c.got() {
		byID[m.ID] = m
	}
	if len(byID) != len(sent) {
		t.Fatalf("%d messages processed, want %d", len(byID), len(sent))
	}
	for i, s := range sent {
		want := inbox.Message{ID: s.ID, Topic: s.Topic, Key: s.Key, Headers: map[string]string{}, Payload: s.Payload}
		for name, v := range s.Headers {
			want.Headers[strings.ToLower(name)] = v
		}
		if got := byID[s.ID]; !reflect.DeepEqual(got, want) {
			t.Errorf("message %d:\n got %#v\nwant %#v", i, got, want)
		}
	}
}

// The sink classifies each of the handler's answers as the outcome asks:
// done, retried, or failed for good.
func TestTheSinkClassifiesTheAnswers(t *testing.T) {
	t.Parallel()
	c := &captured{answer: func(m inbox.Message) (bool, error) {
		switch string(m.Payload) {
		case "duplicate":
			return true, nil
		case "down":
			return false, errors.New("database down")
		case "invalid":
			return false, webhook.Permanent(errors.New("no such order"))
		}
		return false, nil
	}}
	srv := serve(t, webhook.Config{Secrets: []string{newSecret}, MaxBodyBytes: 16}, c)
	url := srv.URL + "/hooks/{topic}"
	msg := func(payload string) outbox.Message {
		return outbox.Message{ID: uuid.New(), Topic: "orders", Attempt: 1, Payload: []byte(payload)}
	}
	for _, tc := range []struct {
		name      string
		secret    string
		payload   string
		permanent bool // else transient; ok when both are false and err is nil
		ok        bool
		errorHas  string
	}{
		{name: "applied", secret: newSecret, payload: "apply", ok: true},
		{name: "duplicate", secret: newSecret, payload: "duplicate", ok: true},
		{name: "process fails", secret: newSecret, payload: "down", errorHas: "500 Internal Server Error: \"database down"},
		{name: "process fails for good", secret: newSecret, payload: "invalid", permanent: true, errorHas: "422 Unprocessable Entity: \"webhook: permanent failure: no such order"},
		{name: "unknown secret", secret: oldSecret, payload: "apply", errorHas: "401 Unauthorized: \"webhook: request not verified: no v1 signature"},
		{name: "body too large", secret: newSecret, payload: strings.Repeat("x", 17), permanent: true, errorHas: "413 Request Entity Too Large"},
	} {
		err := publish(t, url, []string{tc.secret}, msg(tc.payload))[0]
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.ok:
		case err == nil:
			t.Errorf("%s: delivered", tc.name)
		case publishers.IsPermanent(err) != tc.permanent:
			t.Errorf("%s: permanent %t, want %t: %v", tc.name, publishers.IsPermanent(err), tc.permanent, err)
		case !strings.Contains(err.Error(), tc.errorHas):
			t.Errorf("%s: error %q, want it to say %q", tc.name, err, tc.errorHas)
		}
		if err != nil && strings.Contains(err.Error(), strings.TrimPrefix(tc.secret, "whsec_")) {
			t.Errorf("%s: the error shows the secret: %v", tc.name, err)
		}
	}
	if n := len(c.got()); n != 4 {
		t.Errorf("process ran %d times, want 4 (only for verified requests within the size limit)", n)
	}
}

// sign sets the Standard Webhooks headers of r for body, signed with
// secret at time at.
func sign(t *testing.T, r *http.Request, body, secret, id string, at time.Time) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + body))
	r.Header.Set("webhook-id", id)
	r.Header.Set("webhook-timestamp", ts)
	r.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// Requests the sink would not send are refused before process runs.
func TestHandlerRefuses(t *testing.T) {
	t.Parallel()
	c := &captured{}
	h, err := webhook.NewHandler(webhook.Config{Secrets: []string{newSecret}}, c.process)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	for _, tc := range []struct {
		name   string
		method string
		edit   func(r *http.Request) // after signing
		id     string
		at     time.Time
		status int
	}{
		{name: "GET", method: http.MethodGet, status: http.StatusMethodNotAllowed},
		{name: "unsigned", edit: func(r *http.Request) { r.Header.Del("webhook-signature") }, status: http.StatusUnauthorized},
		{name: "stale", at: time.Now().Add(-6 * time.Minute), status: http.StatusUnauthorized},
		{name: "from the future", at: time.Now().Add(6 * time.Minute), status: http.StatusUnauthorized},
		{name: "signed, but the id is no UUID", id: "msg_p5jXN8AQM9LWM0D4loKWxJek", status: http.StatusBadRequest},
		{name: "outbox-event-id differs", edit: func(r *http.Request) { r.Header.Set(outbox.HeaderEventID, uuid.NewString()) }, status: http.StatusBadRequest},
		{name: "key not base64", edit: func(r *http.Request) { r.Header.Set(sink.HeaderKeyBase64, "%%") }, status: http.StatusBadRequest},
	} {
		method := cmp.Or(tc.method, http.MethodPost)
		r := httptest.NewRequest(method, "/hooks/orders", strings.NewReader("{}"))
		sign(t, r, "{}", newSecret, cmp.Or(tc.id, id), cmp.Or(tc.at, time.Now()))
		if tc.edit != nil {
			tc.edit(r)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Errorf("%s: status %d %q, want %d", tc.name, w.Code, w.Body, tc.status)
		}
	}
	if n := len(c.got()); n != 0 {
		t.Errorf("process ran %d times, want 0", n)
	}
}

// A duplicate is answered 204 like a first delivery, told apart by
// HeaderDuplicate; traceparent sent under its own name only is kept.
func TestHandlerAnswersDuplicates(t *testing.T) {
	t.Parallel()
	seen := map[uuid.UUID]bool{}
	c := &captured{answer: func(m inbox.Message) (bool, error) {
		dup := seen[m.ID]
		seen[m.ID] = true
		return dup, nil
	}}
	h, err := webhook.NewHandler(webhook.Config{Secrets: []string{oldSecret, newSecret}}, c.process)
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for i, want := range []string{"", "true"} {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader([]byte("{}")))
		sign(t, r, "{}", oldSecret, id, time.Now())
		r.Header.Set("traceparent", traceparent)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusNoContent || w.Header().Get(webhook.HeaderDuplicate) != want {
			t.Errorf("delivery %d: status %d, %s %q; want 204, %q", i+1, w.Code, webhook.HeaderDuplicate, w.Header().Get(webhook.HeaderDuplicate), want)
		}
	}
	got := c.got()
	if len(got) != 2 || got[0].Headers["traceparent"] != traceparent || got[0].Key != nil || got[0].Topic != "" {
		t.Errorf("messages %#v, want two without key or topic, with the traceparent", got)
	}
}

func TestNewHandlerValidates(t *testing.T) {
	t.Parallel()
	process := func(context.Context, inbox.Message) (bool, error) { return false, nil }
	for name, tc := range map[string]struct {
		cfg     webhook.Config
		process func(context.Context, inbox.Message) (bool, error)
	}{
		"no secret":          {webhook.Config{}, process},
		"bad secret":         {webhook.Config{Secrets: []string{"hunter2-is-my-secret"}}, process},
		"negative tolerance": {webhook.Config{Secrets: []string{newSecret}, Tolerance: -time.Second}, process},
		"negative max body":  {webhook.Config{Secrets: []string{newSecret}, MaxBodyBytes: -1}, process},
		"no process":         {webhook.Config{Secrets: []string{newSecret}}, nil},
	} {
		_, err := webhook.NewHandler(tc.cfg, tc.process)
		if !errors.Is(err, webhook.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
	cfg := webhook.Config{Secrets: []string{newSecret}}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "cfg", cfg)
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%#v", cfg), logged.String()} {
		if strings.Contains(s, strings.TrimPrefix(newSecret, "whsec_")) {
			t.Errorf("Config prints its secret: %s", s)
		}
	}
}

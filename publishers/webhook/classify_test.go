package webhook_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// msg returns a message with a fresh id; key "" means no key.
func msg(topic, key, payload string) outbox.Message {
	m := outbox.Message{ID: uuid.New(), Topic: topic, Payload: []byte(payload), Attempt: 1, CreatedAt: time.Now()}
	if key != "" {
		m.Key = []byte(key)
	}
	return m
}

// publish publishes msgs within 30 s and returns one result per message.
func publish(t *testing.T, p *webhook.Publisher, msgs []outbox.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return publishers.PerMessage(p.Publish(ctx, msgs), len(msgs))
}

// Each answer status is classified as documented: 2xx acknowledged; 3xx
// permanent and not followed; 410 and most 4xx permanent; 401, 403, 407,
// 408, 425, 429 and 5xx transient. The error quotes the answer's body.
func TestAnswersAreClassified(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, withAnswer(func(w http.ResponseWriter, d *delivery) bool {
		code, err := strconv.Atoi(string(d.Body))
		if err != nil {
			return false
		}
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere/"+d.Topic)
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "answer %d", code)
		return true
	}))
	p := newPublisher(t, webhook.Config{URL: r.URL()})
	want := map[int]string{}
	for _, code := range []int{200, 201, 202, 204} {
		want[code] = "acknowledged"
	}
	for _, code := range []int{301, 302, 303, 307, 308, 400, 404, 405, 409, 410, 413, 415, 422} {
		want[code] = "permanent"
	}
	for _, code := range []int{401, 403, 407, 408, 425, 429, 500, 501, 502, 503, 504} {
		want[code] = "transient"
	}
	topic := topicName("status")
	var msgs []outbox.Message
	var codes []int
	for code := range want {
		codes = append(codes, code)
		msgs = append(msgs, msg(topic, "k"+strconv.Itoa(code), strconv.Itoa(code)))
	}
	errs := publish(t, p, msgs)
	for i, err := range errs {
		code := codes[i]
		if got := publishers.ClassOf(err).String(); got != want[code] {
			t.Errorf("answer %d: %s (%v), want %s", code, got, err, want[code])
			continue
		}
		if err == nil {
			continue
		}
		var se *webhook.StatusError
		if !errors.As(err, &se) || se.Code != code {
			t.Errorf("answer %d: the error %v is not a StatusError with that code", code, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("answer %d", code)) {
			t.Errorf("answer %d: the error does not quote the body: %v", code, err)
		}
		if code >= 300 && code < 400 && !strings.Contains(err.Error(), "/elsewhere/") {
			t.Errorf("answer %d: the error does not name the Location: %v", code, err)
		}
	}
	// Only the requests sent: no redirect was followed.
	if n := r.arrived.Load(); n != int64(len(msgs)) {
		t.Errorf("the receiver got %d requests for %d messages: a redirect was followed", n, len(msgs))
	}
}

// Retry-After, in seconds or as an HTTP date, is honoured through
// publishers.RetryAfter on transient answers; an invalid or past value is
// ignored.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	r := startReceiver(t, withAnswer(func(w http.ResponseWriter, d *delivery) bool {
		code, value, _ := strings.Cut(string(d.Body), " ")
		switch value {
		case "future":
			value = time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
		case "past":
			value = time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
		}
		if value != "" {
			w.Header().Set("Retry-After", value)
		}
		n, _ := strconv.Atoi(code)
		w.WriteHeader(n)
		return true
	}))
	p := newPublisher(t, webhook.Config{URL: r.URL()})
	topic := topicName("retry-after")
	cases := []struct {
		body     string
		min, max time.Duration // 0, 0: no RetryAfter
	}{
		{"429 7", 7 * time.Second, 7 * time.Second},
		{"503 120", 2 * time.Minute, 2 * time.Minute},
		{"503 future", 85 * time.Second, 90 * time.Second},
		{"500 0", 0, 0},
		{"503 soon", 0, 0},
		{"503 past", 0, 0},
		{"502", 0, 0},
		{"404 30", -1, -1}, // permanent: no retry at all
	}
	msgs := make([]outbox.Message, len(cases))
	for i, c := range cases {
		msgs[i] = msg(topic, "", c.body)
	}
	for i, err := range publish(t, p, msgs) {
		c := cases[i]
		d, ok := publishers.RetryAfterOf(err)
		switch {
		case c.min < 0:
			if publishers.ClassOf(err).String() != "permanent" || ok {
				t.Errorf("%q: %s, retry after %v (%t); want permanent without a wait", c.body, publishers.ClassOf(err).String(), d, ok)
			}
		case publishers.ClassOf(err).String() != "transient":
			t.Errorf("%q: %s (%v), want transient", c.body, publishers.ClassOf(err).String(), err)
		case c.max == 0 && ok:
			t.Errorf("%q: asks to retry after %v; want no wait", c.body, d)
		case c.max > 0 && (!ok || d < c.min || d > c.max):
			t.Errorf("%q: retry after %v (%t), want %v to %v", c.body, d, ok, c.min, c.max)
		}
	}
}

// A host that cannot be reached makes the whole call unavailable, one
// error for every message; a name that does not resolve too.
func TestUnreachableHostIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	ln.Close()
	for name, url := range map[string]string{
		"connection refused": "http://" + closedPort + "/hooks/{topic}",
		"unknown host":       "http://no-such-host.invalid/hooks/{topic}",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newPublisher(t, webhook.Config{URL: url, DialTimeout: 2 * time.Second})
			msgs := []outbox.Message{msg("t", "a", "1"), msg("t", "a", "2"), msg("t", "b", "3"), msg("t", "", "4")}
			err := p.Publish(t.Context(), msgs)
			var each publishers.Errors
			if errors.As(err, &each) {
				t.Errorf("Publish returned per-message errors %v; want one unavailable error for the call", err)
			}
			if publishers.ClassOf(err).String() != "unavailable" {
				t.Errorf("Publish: %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
			}
			if err := p.Probe(t.Context()); publishers.ClassOf(err).String() != "unavailable" {
				t.Errorf("Probe: %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
			}
		})
	}
}

// A request without an answer within Timeout fails transiently (it may be
// the message's own slow processing), not as an outage; the call returns
// about then.
func TestRequestTimeoutIsTransient(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	r := startReceiver(t, withAnswer(func(http.ResponseWriter, *delivery) bool {
		<-release
		return false
	}))
	t.Cleanup(func() { close(release) }) // before the receiver closes
	const timeout = 200 * time.Millisecond
	p := newPublisher(t, webhook.Config{URL: r.URL(), Timeout: timeout})
	start := time.Now()
	errs := publish(t, p, []outbox.Message{msg(topicName("slow"), "k", "x"), msg(topicName("slow"), "", "y")})
	if took := time.Since(start); took > timeout+15*time.Second { // well below publish's 30s context
		t.Errorf("Publish took %v with a %v request timeout", took, timeout)
	}
	for i, err := range errs {
		if publishers.ClassOf(err).String() != "transient" || !errors.Is(err, webhook.ErrTimeout) {
			t.Errorf("message %d: %s (%v), want transient wrapping ErrTimeout", i, publishers.ClassOf(err).String(), err)
		}
	}
}

// https: a receiver whose certificate is not trusted is unavailable (to
// Publish and Probe); with its CA in LoadTLS, or verification skipped, it
// takes messages.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	url := srv.URL + "/hooks/{topic}"
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	withCA, err := webhook.LoadTLS(caFile, "", "", false)
	if err != nil {
		t.Fatal(err)
	}
	insecure, err := webhook.LoadTLS("", "", "", true)
	if err != nil {
		t.Fatal(err)
	}
	untrusted := newPublisher(t, webhook.Config{URL: url})
	err = untrusted.Publish(t.Context(), []outbox.Message{msg("t", "k", "x")})
	var unknownCA x509.UnknownAuthorityError
	if publishers.ClassOf(err).String() != "unavailable" || !errors.As(err, &unknownCA) {
		t.Errorf("untrusted certificate: %s (%v), want unavailable wrapping x509.UnknownAuthorityError", publishers.ClassOf(err).String(), err)
	}
	if err := untrusted.Probe(t.Context()); publishers.ClassOf(err).String() != "unavailable" {
		t.Errorf("Probe with an untrusted certificate: %s (%v), want unavailable", publishers.ClassOf(err).String(), err)
	}
	for name, cfg := range map[string]webhook.Config{
		"CA file":              {URL: url, TLS: withCA},
		"insecure skip verify": {URL: url, TLS: insecure},
	} {
		p := newPublisher(t, cfg)
		if err := p.Publish(t.Context(), []outbox.Message{msg("t", "k", "x")}); err != nil {
			t.Errorf("%s: Publish: %v", name, err)
		}
		if err := p.Probe(t.Context()); err != nil {
			t.Errorf("%s: Probe: %v", name, err)
		}
	}
}

// Publish after Close fails unavailable (no attempt spent), wrapping
// ErrClosed; so does Probe; Close is idempotent.
func TestPublishAfterClose(t *testing.T) {
	t.Parallel()
	r := startReceiver(t)
	p := newPublisher(t, webhook.Config{URL: r.URL()})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	err := p.Publish(t.Context(), []outbox.Message{msg("t", "k", "x")})
	if publishers.ClassOf(err).String() != "unavailable" || !errors.Is(err, webhook.ErrClosed) {
		t.Errorf("Publish after Close: %s (%v), want unavailable wrapping ErrClosed", publishers.ClassOf(err).String(), err)
	}
	if err := p.Probe(t.Context()); publishers.ClassOf(err).String() != "unavailable" || !errors.Is(err, webhook.ErrClosed) {
		t.Errorf("Probe after Close: %s (%v), want unavailable wrapping ErrClosed", publishers.ClassOf(err).String(), err)
	}
	if n := r.arrived.Load(); n != 0 {
		t.Errorf("%d requests arrived after Close", n)
	}
}

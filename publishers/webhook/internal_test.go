package webhook

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/stdwebhooks"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// sign reproduces the Standard Webhooks reference test vector (the Go
// library's TestWebhookSign).
func TestSignSpecVector(t *testing.T) {
	t.Parallel()
	key, err := stdwebhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := sign([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("sign = %q, want %q", got, want)
	}
	two := sign([][]byte{key, key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := got + " " + got; two != want {
		t.Errorf("two keys: %q, want %q", two, want)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                               0,
		"0":                              0,
		"7":                              7 * time.Second,
		" 120 ":                          2 * time.Minute,
		"99999999999999999999":           maxRetryAfter,
		"-5":                             0,
		"1.5":                            0,
		"soon":                           0,
		"Sun, 01 Mar 2026 12:01:30 GMT":  90 * time.Second,
		"Sunday, 01-Mar-26 12:00:10 GMT": 10 * time.Second,
		"Sun Mar  1 12:00:05 2026":       5 * time.Second,
		"Sun, 01 Mar 2026 11:00:00 GMT":  0,
		"Tue, 01 Mar 2033 12:00:00 GMT":  maxRetryAfter,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

// classify's table, on errors built as post builds them.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"closed", ErrClosed, "unavailable"},
		{"invalid message", ErrInvalidMessage, "permanent"},
		{"410", &StatusError{Code: 410}, "permanent"},
		{"308", &StatusError{Code: 308}, "permanent"},
		{"400", &StatusError{Code: 400}, "permanent"},
		{"401", &StatusError{Code: 401}, "transient"},
		{"429", &StatusError{Code: 429, RetryAfter: time.Second}, "transient"},
		{"599", &StatusError{Code: 599}, "transient"},
		{"timeout", ErrTimeout, "transient"},
		{"canceled", errors.Join(errors.New("x"), contextCanceled()), "transient"},
		{"transport", errors.New("connection refused"), "unavailable"},
		{"already permanent", publishers.Permanent(errors.New("x")), "permanent"},
	} {
		got := classify(c.err)
		class := "transient"
		switch {
		case publishers.IsPermanent(got):
			class = "permanent"
		case errors.Is(got, publishers.ErrUnavailable):
			class = "unavailable"
		}
		if class != c.want {
			t.Errorf("%s: %s (%v), want %s", c.name, class, got, c.want)
		}
	}
	if d, ok := publishers.RetryAfterOf(classify(&StatusError{Code: 503, RetryAfter: 4 * time.Second})); !ok || d != 4*time.Second {
		t.Errorf("503 with Retry-After 4s: retry after %v (%t)", d, ok)
	}
	if _, ok := publishers.RetryAfterOf(classify(&StatusError{Code: 404, RetryAfter: 4 * time.Second})); ok {
		t.Error("a permanent answer asks to be retried")
	}
}

func contextCanceled() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx.Err()
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://h/x":                     "https://h/x",
		"https://user@h/x":                "https://user@h/x",
		"https://user:pw@h/x?y=1":         "https://user:[REDACTED]@h/x?y=1",
		"https://user:p@w@h:8443/{topic}": "https://user:[REDACTED]@h:8443/{topic}",
		"http://u:pw@h":                   "http://u:[REDACTED]@h",
		"https://h/path@with:colon":       "https://h/path@with:colon",
		"not a url":                       "not a url",
		"http://wu:pa/WEBHOOKPASS@h/x":    "[unparsable URL]",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTemplateExpand(t *testing.T) {
	t.Parallel()
	tmpl, err := parseTemplate("https://u:pw@h/a/{topic}?t={topic}&x=1")
	if err != nil {
		t.Fatal(err)
	}
	target, shown := tmpl.expand("orders.created")
	if target != "https://u:pw@h/a/orders.created?t=orders.created&x=1" || shown != "https://u:[REDACTED]@h/a/orders.created?t=orders.created&x=1" {
		t.Errorf("expand = %q, %q", target, shown)
	}
	if tmpl.origin != "https://h" { // no credentials on OPTIONS *
		t.Errorf("origin %q", tmpl.origin)
	}
	// Escaping, for topics the outbox would refuse but a caller might pass.
	target, _ = tmpl.expand("a/b c&d")
	if want := "https://u:pw@h/a/a%2Fb%20c&d?t=a%2Fb+c%26d&x=1"; target != want {
		t.Errorf("expand escapes to %q, want %q", target, want)
	}
}

package webhook_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// New refuses each invalid field with a *ConfigError naming it, all of
// them at once, never quoting a secret or a header value.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	const secretText = "c2Vjb25kLXRlc3Qta2V5LW9mLTMyLWJ5dGVzLWxvbmch"
	ok := "https://hooks.example.com/events/{topic}"
	cases := []struct {
		name  string
		cfg   webhook.Config
		field string
	}{
		{"no URL", webhook.Config{}, "URL"},
		{"relative URL", webhook.Config{URL: "/events/{topic}"}, "URL"},
		{"other scheme", webhook.Config{URL: "ftp://h/{topic}"}, "URL"},
		{"topic in the host", webhook.Config{URL: "https://{topic}.example.com/events"}, "URL"},
		{"topic in the user", webhook.Config{URL: "https://{topic}@example.com/events"}, "URL"},
		{"unknown placeholder", webhook.Config{URL: "https://h/events/{Topic}"}, "URL"},
		{"fragment", webhook.Config{URL: "https://h/events/{topic}#x"}, "URL"},
		{"secret without prefix", webhook.Config{URL: ok, Secrets: []string{secretText}}, "Secrets"},
		{"secret not base64", webhook.Config{URL: ok, Secrets: []string{"whsec_" + secretText + "!"}}, "Secrets"},
		{"secret too short", webhook.Config{URL: ok, Secrets: []string{"whsec_c2hvcnQ="}}, "Secrets"},
		{"negative timeout", webhook.Config{URL: ok, Timeout: -time.Second}, "Timeout"},
		{"negative dial timeout", webhook.Config{URL: ok, DialTimeout: -time.Second}, "DialTimeout"},
		{"negative max in flight", webhook.Config{URL: ok, MaxInFlight: -1}, "MaxInFlight"},
		{"bad content type", webhook.Config{URL: ok, ContentType: "json"}, "ContentType"},
		{"header name not a token", webhook.Config{URL: ok, Headers: map[string]string{"X Y": "v"}}, "Headers"},
		{"reserved header", webhook.Config{URL: ok, Headers: map[string]string{"content-type": "text/plain"}}, "Headers"},
		{"sink's header", webhook.Config{URL: ok, Headers: map[string]string{"Webhook-Signature": "v1,x"}}, "Headers"},
		{"outbox header", webhook.Config{URL: ok, Headers: map[string]string{"outbox-key": "x"}}, "Headers"},
		{"header value with a newline", webhook.Config{URL: ok, Headers: map[string]string{"Authorization": "Bearer hunter2\nX: y"}}, "Headers"},
		{"headers differing in case", webhook.Config{URL: ok, Headers: map[string]string{"X-A": "1", "x-a": "2"}}, "Headers"},
		{"bad probe URL", webhook.Config{URL: ok, ProbeURL: "health"}, "ProbeURL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhook.New(c.cfg)
			var ce *webhook.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, webhook.ErrInvalidConfig) {
				t.Fatalf("New: %v, want a *ConfigError", err)
			}
			if ce.Field != c.field {
				t.Errorf("field %q (%v), want %q", ce.Field, err, c.field)
			}
			for _, secret := range []string{secretText, "hunter2"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error quotes a secret: %v", err)
				}
			}
		})
	}
	_, err := webhook.New(webhook.Config{URL: "ftp://x", Timeout: -1, MaxInFlight: -1})
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *webhook.ConfigError
		if errors.As(e, &ce) {
			fields = append(fields, ce.Field)
		}
	}
	if fmt.Sprint(fields) != "[URL Timeout MaxInFlight]" {
		t.Errorf("New reported %v (%v), want every invalid field", fields, err)
	}
}

// A URL that does not parse, here for a / in its password, is refused
// without a piece of its text: errors and logs show a placeholder.
func TestUnparsableURLIsNotQuoted(t *testing.T) {
	t.Parallel()
	const bad = "http://wu:Pq7/WEBHOOKPASS@hooks.example.com/{topic}"
	for _, cfg := range []webhook.Config{
		{URL: bad},
		{URL: "https://hooks.example.com/{topic}", ProbeURL: bad},
	} {
		_, err := webhook.New(cfg)
		if err == nil || !strings.Contains(err.Error(), "[unparsable URL]") {
			t.Errorf("New: %v, want an error naming the [unparsable URL]", err)
		}
		for _, out := range []string{fmt.Sprint(err), fmt.Sprint(cfg), fmt.Sprintf("%#v", cfg)} {
			if strings.Contains(out, "Pq7") || strings.Contains(out, "WEBHOOKPASS") {
				t.Errorf("%q shows a piece of the password", out)
			}
		}
	}
}

// The defaults fill zero fields; valid URLs pass.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"https://hooks.example.com/events/{topic}",
		"http://127.0.0.1:8080/{topic}?source=relay",
		"https://hooks.example.com/all",
		"https://user:pw@hooks.example.com/events?topic={topic}",
	} {
		p, err := webhook.New(webhook.Config{URL: url})
		if err != nil {
			t.Errorf("%s: %v", url, err)
			continue
		}
		cfg := p.Config()
		if cfg.Timeout != webhook.DefaultTimeout || cfg.DialTimeout != webhook.DefaultDialTimeout ||
			cfg.MaxInFlight != webhook.DefaultMaxInFlight || cfg.ContentType != webhook.DefaultContentType {
			t.Errorf("%s: defaults not applied: %v", url, cfg)
		}
		p.Close()
	}
}

// Formatting or logging a Config shows neither the secrets, nor the values
// of its headers, nor a URL's password.
func TestConfigRedactsSecrets(t *testing.T) {
	t.Parallel()
	cfg := webhook.Config{
		URL:      "https://relay:hunter2@hooks.example.com/events/{topic}",
		ProbeURL: "https://relay:hunter2@hooks.example.com/health",
		Secrets:  []string{testSecret, testSecretOld},
		Headers:  map[string]string{"Authorization": "Bearer tok3n"},
	}
	p, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("webhook sink", "config", p.Config())
	for _, out := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), logged.String(), p.String()} {
		for _, secret := range []string{"hunter2", "tok3n", strings.TrimPrefix(testSecret, "whsec_"), strings.TrimPrefix(testSecretOld, "whsec_")} {
			if strings.Contains(out, secret) {
				t.Errorf("%q shows a secret", out)
			}
		}
	}
	if !strings.Contains(logged.String(), "Authorization") || !strings.Contains(logged.String(), "hooks.example.com") {
		t.Errorf("the log lost what is not secret: %s", logged.String())
	}
}

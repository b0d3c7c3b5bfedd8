package natssink_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, natssink.Config{})
	got := p.Config()
	if len(got.URLs) != 1 || got.URLs[0] != natssink.DefaultURL || got.Name != natssink.DefaultName ||
		got.PublishTimeout != natssink.DefaultPublishTimeout || got.DialTimeout != natssink.DefaultDialTimeout ||
		got.MaxInFlight != natssink.DefaultMaxInFlight {
		t.Errorf("defaults: %v", got)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	creds := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(creds, []byte("not read until connecting"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		cfg   natssink.Config
		field string // "" when valid
	}{
		{"defaults", natssink.Config{}, ""},
		{"several URLs", natssink.Config{URLs: []string{"nats://a:4222", "tls://b:4443", "c:4222", "ws://d:8080", "nats://[::1]:4222", "nats://host"}}, ""},
		{"bad scheme", natssink.Config{URLs: []string{"http://a:4222"}}, "URLs"},
		{"no host", natssink.Config{URLs: []string{"nats://:4222"}}, "URLs"},
		{"bad port", natssink.Config{URLs: []string{"nats://a:99999"}}, "URLs"},
		{"empty port", natssink.Config{URLs: []string{"nats://a:"}}, "URLs"},
		{"blank", natssink.Config{URLs: []string{" "}}, "URLs"},
		{"user and password", natssink.Config{User: "u", Password: "p"}, ""},
		{"password without user", natssink.Config{Password: "p"}, "User"},
		{"token", natssink.Config{Token: "t"}, ""},
		{"creds", natssink.Config{CredentialsFile: creds}, ""},
		{"creds missing", natssink.Config{CredentialsFile: creds + ".missing"}, "CredentialsFile"},
		{"creds and token", natssink.Config{CredentialsFile: creds, Token: "t"}, "CredentialsFile"},
		{"user and token", natssink.Config{User: "u", Token: "t"}, "CredentialsFile"},
		{"negative publish timeout", natssink.Config{PublishTimeout: -time.Second}, "PublishTimeout"},
		{"negative dial timeout", natssink.Config{DialTimeout: -time.Second}, "DialTimeout"},
		{"negative max in flight", natssink.Config{MaxInFlight: -1}, "MaxInFlight"},
	} {
		p, err := natssink.New(c.cfg)
		if err == nil {
			_ = p.Close()
		}
		var ce *natssink.ConfigError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && (!errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, natssink.ErrInvalidConfig)):
			t.Errorf("%s: err = %v, want a ConfigError on %s", c.name, err, c.field)
		}
	}
}

// Secrets never show in the configuration's descriptions or in errors.
func TestSecretsAreRedacted(t *testing.T) {
	t.Parallel()
	const password, token = "hunter2-password", "hunter2-token"
	cfgs := []natssink.Config{
		{User: "u", Password: password, URLs: []string{"nats://u:" + password + "@127.0.0.1:1"}},
		{Token: token, URLs: []string{"nats://" + token + "@127.0.0.1:1"}},
		{URLs: []string{"nats://" + token + "@127.0.0.1:99999"}}, // invalid: the error quotes the URL
	}
	for _, cfg := range cfgs {
		var logs bytes.Buffer
		slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "config", cfg)
		texts := []string{fmt.Sprint(cfg), fmt.Sprintf("%#v", cfg), cfg.String(), logs.String()}
		p, err := natssink.New(cfg)
		if err != nil {
			texts = append(texts, err.Error())
		} else {
			texts = append(texts, fmt.Sprint(p.Config()))
			err := p.Publish(testCtx(t, 10*time.Second), []outbox.Message{newMsg("orders", "k", "x")})
			if err == nil {
				t.Fatal("Publish to a closed port succeeded")
			}
			texts = append(texts, err.Error(), fmt.Sprint(p.Probe(testCtx(t, 10*time.Second))))
			_ = p.Close()
		}
		for _, s := range texts {
			if strings.Contains(s, password) || strings.Contains(s, token) {
				t.Errorf("a secret shows in %s", s)
			}
		}
	}
}

// User and password, and token, authenticate against a server that
// requires them; a wrong secret makes the sink unavailable, and the
// error does not hold it.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	t.Run("user and password", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, "-js", "--user", "relay", "--pass", "s3cret-pass")
		good := newPublisher(t, natssink.Config{URLs: []string{s.URL}, User: "relay", Password: "s3cret-pass"})
		if err := good.Probe(testCtx(t, 10*time.Second)); err != nil {
			t.Errorf("Probe with the right password: %v", err)
		}
		bad := newPublisher(t, natssink.Config{URLs: []string{s.URL}, User: "relay", Password: "wrong-pass"})
		err := bad.Probe(testCtx(t, 10*time.Second))
		if publishers.ClassOf(err).String() != "unavailable" || strings.Contains(fmt.Sprint(err), "wrong-pass") {
			t.Errorf("Probe with a wrong password = %v (%s), want unavailable without the password", err, publishers.ClassOf(err).String())
		}
	})
	t.Run("token", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, "-js", "--auth", "s3cret-token")
		good := newPublisher(t, natssink.Config{URLs: []string{s.URL}, Token: "s3cret-token"})
		if err := good.Probe(testCtx(t, 10*time.Second)); err != nil {
			t.Errorf("Probe with the right token: %v", err)
		}
		bad := newPublisher(t, natssink.Config{URLs: []string{s.URL}, Token: "wrong-token"})
		err := bad.Probe(testCtx(t, 10*time.Second))
		if publishers.ClassOf(err).String() != "unavailable" || strings.Contains(fmt.Sprint(err), "wrong-token") {
			t.Errorf("Probe with a wrong token = %v (%s), want unavailable without the token", err, publishers.ClassOf(err).String())
		}
	})
}

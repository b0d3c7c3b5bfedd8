package rabbitmq_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
)

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	p, err := rabbitmq.New(rabbitmq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := rabbitmq.Config{
		URL: rabbitmq.DefaultURL, MaxInFlight: rabbitmq.DefaultMaxInFlight, MaxMessageBytes: rabbitmq.DefaultMaxMessageBytes,
		PublishTimeout: rabbitmq.DefaultPublishTimeout, DialTimeout: rabbitmq.DefaultDialTimeout,
	}
	if got := p.Config(); got != want {
		t.Errorf("Config() = %v, want %v", got, want)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg   rabbitmq.Config
		field string
	}{
		{rabbitmq.Config{URL: "http://guest:pw@host/"}, "URL"},
		{rabbitmq.Config{URL: "amqp://guest:pw@host:99999/"}, "URL"},
		{rabbitmq.Config{URL: "amqp://guest:p%zzw@host/"}, "URL"},
		{rabbitmq.Config{URL: "amqp://guest:pw@host:port/"}, "URL"},
		{rabbitmq.Config{TLS: &tls.Config{}}, "TLS"},
		{rabbitmq.Config{Exchange: strings.Repeat("x", 256)}, "Exchange"},
		{rabbitmq.Config{MaxInFlight: -1}, "MaxInFlight"},
		{rabbitmq.Config{MaxMessageBytes: -1}, "MaxMessageBytes"},
		{rabbitmq.Config{PublishTimeout: -time.Second}, "PublishTimeout"},
		{rabbitmq.Config{DialTimeout: -time.Second}, "DialTimeout"},
	} {
		_, err := rabbitmq.New(c.cfg)
		var ce *rabbitmq.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, rabbitmq.ErrInvalidConfig) {
			t.Errorf("New(%v) = %v, want a ConfigError for %s", c.cfg, err, c.field)
			continue
		}
		if strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "zz") {
			t.Errorf("New(%v) error %q shows the password", c.cfg, err)
		}
	}
	p, err := rabbitmq.New(rabbitmq.Config{URL: "amqps://u:pw@host/vhost", TLS: &tls.Config{}})
	if err != nil {
		t.Fatalf("amqps with TLS: %v", err)
	}
	p.Close()
}

// Neither the formatted nor the logged Config, nor the publisher, shows
// the password.
func TestConfigRedactsPassword(t *testing.T) {
	t.Parallel()
	p, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://app:s3cr3t@rabbit.example:5672/prod"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := p.Config()
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("sink", "config", cfg)
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), logged.String(), p.String()} {
		if strings.Contains(s, "s3cr3t") || !strings.Contains(s, "rabbit.example") {
			t.Errorf("%s: shows the password, or not the host", s)
		}
	}
}

func TestLoadTLS(t *testing.T) {
	t.Parallel()
	if cfg, err := rabbitmq.LoadTLS("", "", "", false); err != nil || cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("LoadTLS() = %v, %v", cfg, err)
	}
	if _, err := rabbitmq.LoadTLS("/nonexistent/ca.pem", "", "", false); err == nil {
		t.Error("LoadTLS with a missing CA file succeeded")
	}
	if _, err := rabbitmq.LoadTLS("", "cert.pem", "", false); err == nil {
		t.Error("LoadTLS with a certificate but no key succeeded")
	}
}

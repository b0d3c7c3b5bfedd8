package redisstream_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// New fills every zero field with its documented default.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	p := newPublisher(t, redisstream.Config{})
	got := p.Config()
	want := redisstream.Config{
		URL:             redisstream.DefaultURL,
		WaitTimeout:     redisstream.DefaultWaitTimeout,
		MaxMessageBytes: redisstream.DefaultMaxMessageBytes,
		DialTimeout:     redisstream.DefaultDialTimeout,
		Timeout:         redisstream.DefaultTimeout,
		PoolSize:        redisstream.DefaultPoolSize,
		ClientName:      redisstream.DefaultClientName,
	}
	if got.String() != want.String() {
		t.Errorf("Config() = %v\nwant       %v", got, want)
	}
}

// Every invalid field is reported, at once, each as a *ConfigError naming
// it and wrapping ErrInvalidConfig; no message holds the password.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	const secret = "hunter2"
	for _, c := range []struct {
		name   string
		cfg    redisstream.Config
		fields []string
	}{
		{"unparsable URL", redisstream.Config{URL: "redis://u:" + secret + "@[::1"}, []string{"URL"}},
		{"unparsable URL, control byte", redisstream.Config{URL: "redis://u:" + secret + "@host\x7f:6379"}, []string{"URL"}},
		{"scheme", redisstream.Config{URL: "http://u:" + secret + "@host:6379"}, []string{"URL"}},
		{"query", redisstream.Config{URL: "redis://u:" + secret + "@host:6379/0?pool_size=3"}, []string{"URL"}},
		{"database", redisstream.Config{URL: "redis://u:" + secret + "@host:6379/zero"}, []string{"URL"}},
		{"no host", redisstream.Config{URL: "redis:///0"}, []string{"URL"}},
		{"prefix", redisstream.Config{StreamPrefix: "events "}, []string{"StreamPrefix"}},
		{"negatives", redisstream.Config{
			MaxLen: -1, WaitReplicas: -1, WaitTimeout: -time.Second, MaxMessageBytes: -1,
			DialTimeout: -1, Timeout: -1, PoolSize: -1,
		}, []string{"MaxLen", "WaitReplicas", "WaitTimeout", "MaxMessageBytes", "DialTimeout", "Timeout", "PoolSize"}},
		{"wait timeout under a millisecond", redisstream.Config{WaitReplicas: 1, WaitTimeout: time.Microsecond}, []string{"WaitTimeout"}},
		{"client name", redisstream.Config{ClientName: "outbox relay"}, []string{"ClientName"}},
	} {
		_, err := redisstream.New(c.cfg)
		if !errors.Is(err, redisstream.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", c.name, err)
			continue
		}
		var fields []string
		for _, e := range unjoin(err) {
			var ce *redisstream.ConfigError
			if !errors.As(e, &ce) {
				t.Errorf("%s: %v is not a *ConfigError", c.name, e)
				continue
			}
			fields = append(fields, ce.Field)
		}
		if fmt.Sprint(fields) != fmt.Sprint(c.fields) {
			t.Errorf("%s: New reported the fields %v (%v), want %v", c.name, fields, err, c.fields)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error holds the password: %v", c.name, err)
		}
	}
	for _, u := range []string{"redis://h", "redis://u:p@h:1/2", "rediss://[::1]:6380", "unix:///run/redis.sock", "unix://u:p@/run/redis.sock"} {
		p, err := redisstream.New(redisstream.Config{URL: u})
		if err != nil {
			t.Errorf("New with URL %s: %v", u, err)
			continue
		}
		_ = p.Close()
	}
}

// unjoin returns the errors an errors.Join holds, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Neither password appears when a Config or a Publisher is printed or
// logged.
func TestConfigRedactsPasswords(t *testing.T) {
	t.Parallel()
	cfg := redisstream.Config{URL: "redis://user:url-secret@host:6379/1", Password: "field-secret", StreamPrefix: "events:"}
	p := newPublisher(t, cfg)
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("redis sink", "config", cfg, "effective", p.Config())
	for _, s := range []string{cfg.String(), fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), p.String(), logged.String()} {
		for _, secret := range []string{"url-secret", "field-secret"} {
			if strings.Contains(s, secret) {
				t.Errorf("%q leaks %s", s, secret)
			}
		}
		if !strings.Contains(s, "host:6379") {
			t.Errorf("%q does not show the server", s)
		}
	}
}

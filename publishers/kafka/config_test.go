package kafka_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
)

const secret = "hunter2-very-secret"

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	valid := func() kafka.Config {
		return kafka.Config{Brokers: []string{"127.0.0.1:9092"},
			SASL: kafka.SASLConfig{Mechanism: kafka.SASLPlain, Username: "u", Password: secret}}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*kafka.Config)
		field string
	}{
		{"no brokers", func(c *kafka.Config) { c.Brokers = nil }, "Brokers"},
		{"broker without port", func(c *kafka.Config) { c.Brokers = []string{"kafka"} }, "Brokers"},
		{"broker without host", func(c *kafka.Config) { c.Brokers = []string{":9092"} }, "Brokers"},
		{"unknown partitioner", func(c *kafka.Config) { c.Partitioner = "sticky" }, "Partitioner"},
		{"negative batch timeout", func(c *kafka.Config) { c.BatchTimeout = -time.Second }, "BatchTimeout"},
		{"negative batch size", func(c *kafka.Config) { c.BatchSize = -1 }, "BatchSize"},
		{"negative max message bytes", func(c *kafka.Config) { c.MaxMessageBytes = -1 }, "MaxMessageBytes"},
		{"negative max attempts", func(c *kafka.Config) { c.MaxAttempts = -1 }, "MaxAttempts"},
		{"negative write timeout", func(c *kafka.Config) { c.WriteTimeout = -1 }, "WriteTimeout"},
		{"negative dial timeout", func(c *kafka.Config) { c.DialTimeout = -1 }, "DialTimeout"},
		{"unknown SASL mechanism", func(c *kafka.Config) { c.SASL.Mechanism = "gssapi" }, "SASL.Mechanism"},
		{"SASL without username", func(c *kafka.Config) { c.SASL.Username = "" }, "SASL.Username"},
		{"password without mechanism", func(c *kafka.Config) { c.SASL.Mechanism = "" }, "SASL.Mechanism"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid()
			tc.edit(&cfg)
			p, err := kafka.New(cfg)
			if err == nil {
				_ = p.Close()
				t.Fatal("New accepted the config")
			}
			if !errors.Is(err, kafka.ErrInvalidConfig) {
				t.Errorf("error %v should wrap ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q should name %s", err, tc.field)
			}
			mustNotContain(t, "error", err.Error(), secret)
		})
	}

	for _, mech := range []string{"plain", "PLAIN", "scram-sha-256", "SCRAM-SHA-512"} {
		cfg := valid()
		cfg.SASL.Mechanism = mech
		p, err := kafka.New(cfg)
		if err != nil {
			t.Errorf("New with SASL mechanism %q: %v", mech, err)
			continue
		}
		_ = p.Close()
	}
}

func TestConfigRedactsPassword(t *testing.T) {
	t.Parallel()
	cfg := kafka.Config{
		Brokers: []string{"k1:9092", "k2:9092"},
		TLS:     &tls.Config{MinVersion: tls.VersionTLS12},
		SASL:    kafka.SASLConfig{Mechanism: kafka.SASLScramSHA512, Username: "relay", Password: secret},
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	logger.Info("config", "kafka", cfg)
	logger.Info("sasl", "sasl", cfg.SASL)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "kafka", cfg)

	for name, s := range map[string]string{
		"%v": fmt.Sprintf("%v", cfg), "%+v": fmt.Sprintf("%+v", cfg), "%#v": fmt.Sprintf("%#v", cfg),
		"%s": fmt.Sprintf("%s", cfg), "SASL %+v": fmt.Sprintf("%+v", cfg.SASL), "SASL %#v": fmt.Sprintf("%#v", cfg.SASL),
		"pointer %v": fmt.Sprintf("%v", &cfg), "slog": buf.String(),
	} {
		mustNotContain(t, name, s, secret)
		if !strings.Contains(s, "relay") || !strings.HasPrefix(name, "SASL") && !strings.Contains(s, "k2:9092") {
			t.Errorf("%s lost the non-secret fields: %s", name, s)
		}
		if !strings.Contains(s, "REDACTED") {
			t.Errorf("%s does not show that a password is set: %s", name, s)
		}
	}
}

func TestLoadTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files, err := kfakebroker.GenerateTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg, err := kafka.LoadTLS(files.CAFile, files.CertFile, files.KeyFile, false)
	if err != nil {
		t.Fatalf("LoadTLS: %v", err)
	}
	if cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.InsecureSkipVerify || cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("LoadTLS = %+v", cfg)
	}
	if cfg, err := kafka.LoadTLS("", "", "", true); err != nil || !cfg.InsecureSkipVerify || cfg.RootCAs != nil {
		t.Errorf("LoadTLS(insecure) = %+v, %v", cfg, err)
	}

	for _, tc := range []struct {
		name, ca, cert, key string
	}{
		{"missing CA file", filepath.Join(dir, "nope.pem"), "", ""},
		{"CA file without certificate", notPEM, "", ""},
		{"certificate without key", files.CAFile, files.CertFile, ""},
		{"key without certificate", files.CAFile, "", files.KeyFile},
		{"bad key pair", files.CAFile, files.CertFile, notPEM},
	} {
		if _, err := kafka.LoadTLS(tc.ca, tc.cert, tc.key, false); err == nil {
			t.Errorf("%s: LoadTLS succeeded", tc.name)
		}
	}
}

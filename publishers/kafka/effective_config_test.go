package kafka_test

import (
	"strings"
	"testing"

	"github.com/outboxrelay/outboxrelay/publishers/kafka"
)

// Config reports the values in effect, so that the binary logs what it
// really uses, and still hides the password.
func TestPublisherConfigHasDefaultsAndHidesPassword(t *testing.T) {
	t.Parallel()
	p, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"},
		SASL: kafka.SASLConfig{Mechanism: kafka.SASLPlain, Username: "u", Password: "hunter2-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := p.Config()
	if cfg.BatchTimeout != kafka.DefaultBatchTimeout || cfg.MaxAttempts != kafka.DefaultMaxAttempts || cfg.Partitioner != kafka.PartitionerMurmur2 {
		t.Errorf("Config() = %v, want the defaults filled in", cfg)
	}
	if s := cfg.String(); strings.Contains(s, "hunter2-secret") {
		t.Errorf("Config().String() leaks the password: %s", s)
	}
}

package kafka_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/publishers/kafka"
)

// configFields are the field names an invalid-config error may name.
var configFields = []string{"Brokers", "Partitioner", "BatchTimeout", "BatchSize", "MaxMessageBytes",
	"MaxAttempts", "WriteTimeout", "DialTimeout", "SASL"}

// FuzzNewConfig feeds New configurations as an operator could write them
// (TLS, which needs files, is left out). New must never panic; a rejection
// wraps ErrInvalidConfig, names a field and never holds the password; an
// accepted configuration is one the publisher can use: brokers are
// host:port with a port a TCP dial accepts, the partitioner and SASL
// mechanism are known ones, SASL has a user, and neither the Config nor the
// Publisher prints the password.
func FuzzNewConfig(f *testing.F) {
	f.Add("127.0.0.1:9092", "", "", "", "", int64(0), 0, 0, 0)
	f.Add("k1:9092,k2:9093,[::1]:9094", "murmur2", "scram-sha-512", "relay", "pw-secret-1", int64(time.Millisecond), 100, 1<<20, 3)
	f.Add("kafka", "crc32", "", "", "", int64(0), 0, 0, 0)
	f.Add(":9092", "fnv1a", "", "", "", int64(0), 0, 0, 0)
	f.Add("kafka:", "round-robin", "", "", "", int64(0), 0, 0, 0)
	f.Add("kafka:abc", "", "", "", "", int64(0), 0, 0, 0)
	f.Add("kafka:99999", "", "", "", "", int64(0), 0, 0, 0)
	f.Add("kafka:0", "", "", "", "", int64(0), 0, 0, 0)
	f.Add("kafka:-1", "", "", "", "", int64(0), 0, 0, 0)
	f.Add("kafka:9092", "sticky", "", "", "", int64(0), 0, 0, 0)
	f.Add("kafka:9092", "", "PLAIN", "user", "pw-secret-2", int64(0), 0, 0, 0)
	f.Add("kafka:9092", "", "gssapi", "user", "pw-secret-3", int64(0), 0, 0, 0)
	f.Add("kafka:9092", "", "plain", "", "pw-secret-4", int64(0), 0, 0, 0)
	f.Add("kafka:9092", "", "", "", "pw-secret-5", int64(0), 0, 0, 0)
	f.Add("kafka:9092", "", "scram-sha-256", "u", "bell\a-secret-6", int64(0), 0, 0, 0)
	f.Add("kafka:9092", "", "", "", "", int64(-1), -1, -1, -1)
	f.Add("[0]:1", "", "sCrAm-shA-512", "0", "0000000", int64(time.Millisecond), 100, 1<<20, 3) // a password that shows up in printed numbers
	f.Fuzz(func(t *testing.T, brokers, partitioner, mechanism, username, password string, batchTimeout int64, batchSize, maxMessageBytes, maxAttempts int) {
		cfg := kafka.Config{
			Brokers:         strings.Split(brokers, ","),
			Partitioner:     partitioner,
			BatchTimeout:    time.Duration(batchTimeout),
			BatchSize:       batchSize,
			MaxMessageBytes: maxMessageBytes,
			MaxAttempts:     maxAttempts,
			SASL:            kafka.SASLConfig{Mechanism: mechanism, Username: username, Password: password},
		}
		if brokers == "" {
			cfg.Brokers = nil
		}
		// Leaks are checked by comparison: what is printed must not change
		// when only the password does.
		other := cfg
		other.SASL.Password = "other-" + password

		p, err := kafka.New(cfg)
		if err != nil {
			if !errors.Is(err, kafka.ErrInvalidConfig) {
				t.Fatalf("New(%v) = %v, which does not wrap ErrInvalidConfig", cfg, err)
			}
			if !slices.ContainsFunc(configFields, func(field string) bool { return strings.Contains(err.Error(), field) }) {
				t.Fatalf("New(%v) = %v, which names no field", cfg, err)
			}
			if password == "" {
				return
			}
			// Only SASLprep looks at the password, and its error does not
			// quote it.
			p2, err2 := kafka.New(other)
			switch {
			case err2 == nil:
				_ = p2.Close()
				if !strings.Contains(err.Error(), "SASLprep") {
					t.Fatalf("New refuses the config for its password: %v", err)
				}
			case err2.Error() != err.Error() && !strings.Contains(err.Error()+err2.Error(), "SASLprep"):
				t.Fatalf("the error depends on the password:\n%v\n%v", err, err2)
			}
			return
		}
		defer p.Close()
		eff := p.Config()
		if len(eff.Brokers) == 0 {
			t.Fatal("accepted a config without brokers")
		}
		for _, b := range eff.Brokers {
			host, port, err := net.SplitHostPort(b)
			if err != nil || host == "" {
				t.Fatalf("accepted broker %q, not host:port", b)
			}
			if n, err := net.LookupPort("tcp", port); err != nil || n == 0 {
				t.Fatalf("accepted broker %q whose port no dial accepts (%d, %v)", b, n, err)
			}
		}
		switch eff.Partitioner {
		case kafka.PartitionerMurmur2, kafka.PartitionerCRC32, kafka.PartitionerFNV1a, kafka.PartitionerRoundRobin:
		default:
			t.Fatalf("accepted partitioner %q", eff.Partitioner)
		}
		switch eff.SASL.Mechanism {
		case "":
			if eff.SASL.Username != "" || eff.SASL.Password != "" {
				t.Fatalf("accepted SASL credentials without a mechanism: %v", eff.SASL)
			}
		case kafka.SASLPlain, kafka.SASLScramSHA256, kafka.SASLScramSHA512:
			if eff.SASL.Username == "" {
				t.Fatalf("accepted SASL %s without a user", eff.SASL.Mechanism)
			}
		default:
			t.Fatalf("accepted SASL mechanism %q", eff.SASL.Mechanism)
		}
		if eff.BatchTimeout <= 0 || eff.BatchSize <= 0 || eff.MaxMessageBytes <= 0 || eff.MaxAttempts <= 0 ||
			eff.WriteTimeout <= 0 || eff.DialTimeout <= 0 || eff.ClientID == "" {
			t.Fatalf("effective config has a non-positive or empty setting: %v", eff)
		}
		if eff.SASL.Password != password || eff.SASL.Username != username || !slices.Equal(eff.Brokers, cfg.Brokers) {
			t.Fatalf("effective config lost what it was given: %v", eff)
		}
		if password != "" {
			otherEff := eff
			otherEff.SASL.Password = other.SASL.Password
			if got, want := printed(p, eff), printed(p, otherEff); got != want {
				t.Fatalf("what is printed of the config depends on the password:\n%s\n%s", got, want)
			}
		}
	})
}

// printed is everything the relay may print of a publisher and its
// configuration: formatted with fmt and logged with log/slog.
func printed(p *kafka.Publisher, cfg kafka.Config) string {
	var b bytes.Buffer
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{ReplaceAttr: noTime})).Info("kafka sink", "config", cfg, "sasl", cfg.SASL)
	slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: noTime})).Info("kafka sink", "config", cfg, "sasl", cfg.SASL)
	fmt.Fprintf(&b, "%v\n%+v\n%#v\n%s\n%+v\n%#v\n%v\n", cfg, cfg, cfg, cfg, cfg.SASL, cfg.SASL, p)
	return b.String()
}

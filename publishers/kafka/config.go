package kafka

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
)

// Partitioners accepted in Config.Partitioner.
const (
	// PartitionerMurmur2 hashes the key with murmur2, like the Java client's
	// default partitioner (and librdkafka's "murmur2_random"): a keyed
	// message lands on the same partition whichever of these clients
	// produced it. Messages without a key go to a random partition.
	PartitionerMurmur2 = "murmur2"
	// PartitionerCRC32 hashes the key with CRC-32, like librdkafka's default
	// "consistent_random" partitioner. Messages without a key go to a random
	// partition.
	PartitionerCRC32 = "crc32"
	// PartitionerFNV1a hashes the key with FNV-1a, like Sarama's default
	// partitioner and kafka-go's Hash balancer. Messages without a key are
	// spread round-robin.
	PartitionerFNV1a = "fnv1a"
	// PartitionerRoundRobin ignores keys and spreads messages round-robin:
	// no per-key ordering.
	PartitionerRoundRobin = "round-robin"
)

// SASL mechanisms accepted in SASLConfig.Mechanism (case-insensitive).
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultBatchTimeout is the default Config.BatchTimeout, which is
	// ignored.
	//
	// Deprecated: see Config.BatchTimeout.
	DefaultBatchTimeout = 100 * time.Microsecond
	// DefaultBatchSize is the default Config.BatchSize, kafka-go's own.
	DefaultBatchSize = 100
	// DefaultMaxMessageBytes is the default Config.MaxMessageBytes: 1 MiB.
	DefaultMaxMessageBytes = 1 << 20
	// DefaultMaxAttempts is the default Config.MaxAttempts.
	DefaultMaxAttempts = 3
	// DefaultWriteTimeout is the default Config.WriteTimeout.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultDialTimeout is the default Config.DialTimeout.
	DefaultDialTimeout = 5 * time.Second
)

// Config configures a Publisher. Only Brokers is required; every other
// field has a documented default that its zero value selects.
//
// Config redacts SASL.Password when formatted with %v or logged with
// log/slog; errors returned by New and Publish never contain it.
type Config struct {
	// Brokers are the bootstrap brokers, as "host:port". Required.
	Brokers []string

	// Partitioner chooses the partition of each message from its key: one
	// of PartitionerMurmur2, PartitionerCRC32, PartitionerFNV1a or
	// PartitionerRoundRobin. Defaults to PartitionerMurmur2, compatible
	// with the Java client's default partitioner.
	Partitioner string

	// ClientID is the client id the brokers see (in their logs and
	// quotas). Defaults to "outboxrelay".
	ClientID string

	// BatchTimeout is ignored.
	//
	// Deprecated: Publish sends each produce request as soon as it is
	// built; nothing waits for a batch to fill. The field stays so that
	// existing configurations compile.
	BatchTimeout time.Duration

	// BatchSize is the most messages sent to one partition in one produce
	// request; a Publish with more messages for a partition sends several
	// requests, one after the other. Defaults to DefaultBatchSize (100).
	BatchSize int

	// MaxMessageBytes is the largest message (key, value and headers, as
	// kafka-go estimates it) that Publish sends, and the most bytes of one
	// produce request per partition. A larger message fails permanently
	// without reaching the broker. Keep it at or below the broker's
	// message.max.bytes (or the topic's max.message.bytes). Defaults to
	// DefaultMaxMessageBytes (1 MiB).
	MaxMessageBytes int

	// MaxAttempts is how many times Publish tries a produce request that
	// failed with a retriable error before it reports the failure. The
	// relay retries on its own, with backoff, so this stays small. Defaults
	// to DefaultMaxAttempts (3).
	MaxAttempts int

	// WriteTimeout bounds one produce request, and one metadata request,
	// of kafka-go. Defaults to DefaultWriteTimeout (10 s).
	WriteTimeout time.Duration

	// DialTimeout bounds establishing a connection to a broker, TLS
	// handshake and SASL authentication included. Defaults to
	// DefaultDialTimeout (5 s).
	DialTimeout time.Duration

	// AllowAutoTopicCreation asks the brokers to create missing topics
	// (which they do only with auto.create.topics.enable=true). Defaults to
	// false: a message for a missing topic fails permanently.
	AllowAutoTopicCreation bool

	// TLS, when non-nil, makes every broker connection use TLS with this
	// client configuration; LoadTLS builds one from files. When ServerName
	// is empty, the broker's host name is used. Defaults to nil: plaintext.
	TLS *tls.Config

	// SASL configures SASL authentication. Defaults to none.
	SASL SASLConfig

	// Logger receives kafka-go's internal log lines at Debug level and its
	// error lines at Warn level. Defaults to nil: discarded.
	Logger *slog.Logger
}

// SASLConfig configures SASL authentication. The zero value disables it.
type SASLConfig struct {
	// Mechanism is SASLPlain, SASLScramSHA256 or SASLScramSHA512. Defaults
	// to "": no SASL. PLAIN sends the password in clear text: use it with
	// TLS only.
	Mechanism string
	// Username is the SASL user. Required with a Mechanism.
	Username string
	// Password is the SASL password. It is never logged or put in errors.
	Password string
}

const redacted = "[REDACTED]"

// String describes s without its password.
func (s SASLConfig) String() string {
	if s.Mechanism == "" && s.Username == "" && s.Password == "" {
		return "{none}"
	}
	pw := ""
	if s.Password != "" {
		pw = redacted
	}
	return fmt.Sprintf("{Mechanism:%s Username:%s Password:%s}", s.Mechanism, s.Username, pw)
}

// GoString is like String, so that %#v redacts the password too.
func (s SASLConfig) GoString() string { return s.String() }

// LogValue implements slog.LogValuer: the password is redacted.
func (s SASLConfig) LogValue() slog.Value {
	pw := ""
	if s.Password != "" {
		pw = redacted
	}
	return slog.GroupValue(
		slog.String("mechanism", s.Mechanism),
		slog.String("username", s.Username),
		slog.String("password", pw),
	)
}

// String describes c without secrets.
func (c Config) String() string {
	return fmt.Sprintf("kafka.Config{Brokers:%v Partitioner:%s ClientID:%s BatchSize:%d MaxMessageBytes:%d MaxAttempts:%d WriteTimeout:%s DialTimeout:%s AllowAutoTopicCreation:%t TLS:%t SASL:%s}",
		c.Brokers, c.Partitioner, c.ClientID, c.BatchSize, c.MaxMessageBytes, c.MaxAttempts,
		c.WriteTimeout, c.DialTimeout, c.AllowAutoTopicCreation, c.TLS != nil, c.SASL)
}

// GoString is like String, so that %#v redacts secrets too.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer: the SASL password is redacted and the
// TLS configuration is reduced to whether it is set.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("brokers", c.Brokers),
		slog.String("partitioner", c.Partitioner),
		slog.String("client_id", c.ClientID),
		slog.Int("batch_size", c.BatchSize),
		slog.Int("max_message_bytes", c.MaxMessageBytes),
		slog.Int("max_attempts", c.MaxAttempts),
		slog.Duration("write_timeout", c.WriteTimeout),
		slog.Duration("dial_timeout", c.DialTimeout),
		slog.Bool("allow_auto_topic_creation", c.AllowAutoTopicCreation),
		slog.Bool("tls", c.TLS != nil),
		slog.Any("sasl", c.SASL),
	)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Partitioner == "" {
		c.Partitioner = PartitionerMurmur2
	}
	if c.ClientID == "" {
		c.ClientID = "outboxrelay"
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	c.SASL.Mechanism = strings.ToLower(c.SASL.Mechanism)
	return c
}

// validate reports the first invalid field of c, after withDefaults. The
// error is a *ConfigError (wrapping ErrInvalidConfig) naming the field; it
// never holds the password.
func (c Config) validate() error {
	if len(c.Brokers) == 0 {
		return invalid("Brokers", "at least one broker is required")
	}
	for i, b := range c.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" || port == "" {
			return invalid("Brokers", fmt.Sprintf("entry %d (%q) is not host:port", i, b))
		}
		// A port no dial accepts would only ever show as an outage.
		if n, err := net.LookupPort("tcp", port); err != nil || n == 0 {
			return invalid("Brokers", fmt.Sprintf("entry %d (%q) has no valid port: use 1-65535", i, b))
		}
	}
	switch c.Partitioner {
	case PartitionerMurmur2, PartitionerCRC32, PartitionerFNV1a, PartitionerRoundRobin:
	default:
		return invalid("Partitioner", fmt.Sprintf("%q is not one of %s, %s, %s, %s",
			c.Partitioner, PartitionerMurmur2, PartitionerCRC32, PartitionerFNV1a, PartitionerRoundRobin))
	}
	switch {
	case c.BatchTimeout < 0:
		return invalid("BatchTimeout", "must not be negative")
	case c.BatchSize < 0:
		return invalid("BatchSize", "must not be negative")
	case c.MaxMessageBytes < 0:
		return invalid("MaxMessageBytes", "must not be negative")
	case c.MaxAttempts < 0:
		return invalid("MaxAttempts", "must not be negative")
	case c.WriteTimeout < 0:
		return invalid("WriteTimeout", "must not be negative")
	case c.DialTimeout < 0:
		return invalid("DialTimeout", "must not be negative")
	}
	switch c.SASL.Mechanism {
	case "":
		if c.SASL.Username != "" || c.SASL.Password != "" {
			return invalid("SASL.Mechanism", "a SASL username or password is set but no mechanism")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASL.Username == "" {
			return invalid("SASL.Username", "required with a SASL mechanism")
		}
	default:
		return invalid("SASL.Mechanism", fmt.Sprintf("%q is not one of %s, %s, %s",
			c.SASL.Mechanism, SASLPlain, SASLScramSHA256, SASLScramSHA512))
	}
	return nil
}

func invalid(field, reason string) error {
	return &ConfigError{Field: field, Reason: reason}
}

// ConfigError reports an invalid Config field; it wraps ErrInvalidConfig
// and never holds the SASL password.
type ConfigError struct {
	// Field is the Config field, e.g. "Partitioner" or "SASL.Mechanism";
	// "SASL" when the username and password together are refused.
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalidConfig, for errors.Is.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

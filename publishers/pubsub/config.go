package pubsubsink

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultPublishTimeout is the default Config.PublishTimeout.
	DefaultPublishTimeout = 30 * time.Second
	// DefaultMaxMessageBytes is the default Config.MaxMessageBytes: the
	// service's 10 MB limit on a publish request, less room for the
	// request's own fields.
	DefaultMaxMessageBytes = 10_000_000 - 64<<10
	// EmulatorHostEnv is the variable the Google client reads to reach an
	// emulator; New honours it as it does Config.Endpoint.
	EmulatorHostEnv = "PUBSUB_EMULATOR_HOST"
)

// ErrInvalidConfig is wrapped by the error New returns for an invalid
// Config; the message names the field.
var ErrInvalidConfig = errors.New("pubsub: invalid config")

// ConfigError is the error of an invalid Config field. It wraps
// ErrInvalidConfig.
type ConfigError struct {
	Field  string // the Config field, "Project"
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalidConfig, e.Field, e.Reason)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Config configures a Publisher. Every field but Project has a documented
// default that its zero value selects.
type Config struct {
	// Project is the Google Cloud project that holds the topics. Required.
	Project string

	// Endpoint is the host:port of an emulator or fake (pstest) to publish
	// to, without TLS and without credentials. Defaults to the
	// PUBSUB_EMULATOR_HOST variable, and without it to Google's service,
	// reached with Application Default Credentials.
	Endpoint string

	// PublishTimeout bounds one publish request of the client, its
	// sending included, even when Publish's context has no deadline.
	// Defaults to DefaultPublishTimeout (30 s).
	PublishTimeout time.Duration

	// MaxMessageBytes is the largest message sent, as encoded: payload,
	// attributes and ordering key. A larger one fails permanently, before
	// sending. Defaults to DefaultMaxMessageBytes.
	MaxMessageBytes int

	// Logger receives the publisher's log lines. Defaults to none.
	Logger *slog.Logger `json:"-"`
}

// withDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Endpoint == "" {
		cfg.Endpoint = os.Getenv(EmulatorHostEnv)
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = DefaultPublishTimeout
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	return cfg
}

// Validate returns every invalid field of cfg, defaults applied, joined
// (errors.Join), each a *ConfigError. New calls it.
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	var errs []error
	bad := func(field, reason string) { errs = append(errs, &ConfigError{Field: field, Reason: reason}) }
	if cfg.Project == "" {
		bad("Project", "required")
	}
	if cfg.PublishTimeout < 0 {
		bad("PublishTimeout", "must be positive")
	}
	if cfg.MaxMessageBytes < 0 || cfg.MaxMessageBytes > DefaultMaxMessageBytes {
		bad("MaxMessageBytes", fmt.Sprintf("must be between 1 and %d", DefaultMaxMessageBytes))
	}
	return errors.Join(errs...)
}

// LogValue logs the configuration; it holds no secret (credentials come
// from the environment and are never read here).
func (cfg Config) LogValue() slog.Value {
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "pubsub.googleapis.com (Application Default Credentials)"
	}
	return slog.GroupValue(
		slog.String("project", cfg.Project),
		slog.String("endpoint", endpoint),
		slog.Duration("publish_timeout", cfg.PublishTimeout),
		slog.Int("max_message_bytes", cfg.MaxMessageBytes),
	)
}

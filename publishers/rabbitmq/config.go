package rabbitmq

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultURL is the default Config.URL: a broker on this machine with
	// RabbitMQ's default user, and the default virtual host "/".
	DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"
	// DefaultMaxInFlight is the default Config.MaxInFlight.
	DefaultMaxInFlight = 1000
	// DefaultMaxMessageBytes is the default Config.MaxMessageBytes:
	// 128 MiB, RabbitMQ's own default max_message_size (3.8 and later).
	DefaultMaxMessageBytes = 128 << 20
	// DefaultPublishTimeout is the default Config.PublishTimeout.
	DefaultPublishTimeout = 30 * time.Second
	// DefaultDialTimeout is the default Config.DialTimeout.
	DefaultDialTimeout = 5 * time.Second
)

// maxShortString is the longest AMQP short string: the most bytes of an
// exchange name or a routing key.
const maxShortString = 255

// Config configures a Publisher. Every field has a documented default that
// its zero value selects.
//
// Config redacts the password of URL when formatted with %v or logged with
// log/slog; errors returned by New, Publish and Probe never contain it.
type Config struct {
	// URL is the broker's AMQP URI, amqp://user:password@host:port/vhost or
	// amqps://... for TLS (a vhost other than "/" is percent-encoded:
	// "/%2F" is "/", "/orders" is "orders"). Reserved characters in the
	// user or password must be percent-encoded. Defaults to DefaultURL.
	URL string

	// Exchange is the exchange of a message whose topic names no exchange
	// (has no "/"): its topic is then the routing key. Defaults to "", the
	// default exchange, which routes a message to the queue its routing key
	// names. See the package documentation for the mapping.
	Exchange string

	// MaxInFlight is the most messages one Publish call has sent on its
	// channel and not yet had confirmed: a larger batch waits for the
	// oldest confirms before it sends more. Defaults to DefaultMaxInFlight
	// (1000).
	MaxInFlight int

	// MaxMessageBytes is the largest payload Publish sends; a larger
	// message fails permanently without reaching the broker. Keep it at or
	// below the broker's max_message_size. Defaults to
	// DefaultMaxMessageBytes (128 MiB, the broker's default).
	MaxMessageBytes int

	// PublishTimeout bounds one Publish call, on top of its context: the
	// wait for a channel and for the broker's confirms. Defaults to
	// DefaultPublishTimeout (30 s).
	PublishTimeout time.Duration

	// DialTimeout bounds establishing the connection: TCP, TLS handshake
	// and AMQP handshake. Defaults to DefaultDialTimeout (5 s).
	DialTimeout time.Duration

	// TLS, when non-nil, is the client TLS configuration of an amqps://
	// URL; LoadTLS builds one from files. It requires an amqps:// URL. When
	// nil, an amqps:// URL verifies the broker against the system roots
	// (or the URL's cacertfile, certfile and keyfile parameters). Defaults
	// to nil.
	TLS *tls.Config

	// Logger receives a Warn line when the connection to the broker closes
	// unexpectedly. Defaults to nil: discarded.
	Logger *slog.Logger
}

// String describes c without the password.
func (c Config) String() string {
	return fmt.Sprintf("rabbitmq.Config{URL:%s Exchange:%q MaxInFlight:%d MaxMessageBytes:%d PublishTimeout:%s DialTimeout:%s TLS:%t}",
		redactURL(c.URL), c.Exchange, c.MaxInFlight, c.MaxMessageBytes, c.PublishTimeout, c.DialTimeout, c.TLS != nil)
}

// GoString is like String, so that %#v redacts the password too.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer: the password is redacted and the TLS
// configuration is reduced to whether it is set.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", redactURL(c.URL)),
		slog.String("exchange", c.Exchange),
		slog.Int("max_in_flight", c.MaxInFlight),
		slog.Int("max_message_bytes", c.MaxMessageBytes),
		slog.Duration("publish_timeout", c.PublishTimeout),
		slog.Duration("dial_timeout", c.DialTimeout),
		slog.Bool("tls", c.TLS != nil),
	)
}

// redactURL returns raw with its password replaced by "xxxxx", or a
// placeholder when raw does not parse (its text might hold the password).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	return u.Redacted()
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	return c
}

// validate reports the first invalid field of c, after withDefaults. The
// error is a *ConfigError (wrapping ErrInvalidConfig) naming the field; it
// never holds the password.
func (c Config) validate() error {
	uri, err := amqp.ParseURI(c.URL)
	if err != nil {
		var (
			ue  *url.Error
			esc url.EscapeError
		)
		switch {
		case errors.As(err, &esc):
			err = errors.New("it holds an invalid %-escape") // quoting it could quote the password
		case errors.As(err, &ue):
			err = ue.Err // the url.Error quotes the URL, password and all
		}
		return invalid("URL", fmt.Sprintf("not an AMQP URI (amqp://user:password@host:port/vhost): %v", err))
	}
	if uri.Host == "" {
		return invalid("URL", "names no host")
	}
	if uri.Port <= 0 || uri.Port > 65535 {
		return invalid("URL", fmt.Sprintf("port %d is not valid: use 1-65535", uri.Port))
	}
	if c.TLS != nil && uri.Scheme != "amqps" {
		return invalid("TLS", "a TLS configuration needs an amqps:// URL")
	}
	if err := validateExchange(c.Exchange); err != nil {
		return invalid("Exchange", err.Error())
	}
	switch {
	case c.MaxInFlight < 0:
		return invalid("MaxInFlight", "must not be negative")
	case c.MaxMessageBytes < 0:
		return invalid("MaxMessageBytes", "must not be negative")
	case c.PublishTimeout < 0:
		return invalid("PublishTimeout", "must not be negative")
	case c.DialTimeout < 0:
		return invalid("DialTimeout", "must not be negative")
	}
	return nil
}

func invalid(field, reason string) error {
	return &ConfigError{Field: field, Reason: reason}
}

// ConfigError reports an invalid Config field; it wraps ErrInvalidConfig
// and never holds the password.
type ConfigError struct {
	// Field is the Config field, e.g. "URL" or "MaxInFlight".
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

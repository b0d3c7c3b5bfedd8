package natssink

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultURL is the default Config.URLs entry: a server on this machine.
	DefaultURL = "nats://127.0.0.1:4222"
	// DefaultName is the default Config.Name.
	DefaultName = "outboxrelay"
	// DefaultPublishTimeout is the default Config.PublishTimeout.
	DefaultPublishTimeout = 10 * time.Second
	// DefaultDialTimeout is the default Config.DialTimeout.
	DefaultDialTimeout = 5 * time.Second
	// DefaultMaxInFlight is the default Config.MaxInFlight.
	DefaultMaxInFlight = 1024
)

// Config configures a Publisher. Every field has a documented default that
// its zero value selects.
//
// Config redacts Password, Token and any password in a URL when formatted
// with %v or logged with log/slog; errors returned by New, Publish and
// Probe never contain them.
type Config struct {
	// URLs are the servers to connect to, as nats://host:port (tls://,
	// ws:// and wss:// work too; a bare host:port means nats://). A
	// connection goes to one of them, tried in random order. Defaults to
	// DefaultURL.
	URLs []string

	// Name is the connection name the servers show (in their monitoring
	// endpoints and logs). Defaults to DefaultName ("outboxrelay").
	Name string

	// CredentialsFile is a NATS credentials file (a user JWT and its NKey
	// seed, as `nsc` writes them). Defaults to "": none. At most one of
	// CredentialsFile, User and Token is set.
	CredentialsFile string
	// User and Password authenticate with a user name and password.
	// Password is never logged or put in errors. Defaults to none.
	User, Password string
	// Token authenticates with a token; it is never logged or put in
	// errors. Defaults to none.
	Token string

	// TLS, when non-nil, makes every connection use TLS with this client
	// configuration; LoadTLS builds one from files. When ServerName is
	// empty, the server's host name is used. Defaults to nil: TLS only when
	// a URL says tls:// or wss://, or the server requires it, verified
	// against the system roots.
	TLS *tls.Config

	// PublishTimeout bounds the wait for each message's PubAck, even when
	// Publish's context has no deadline, and a write to the server that
	// does not drain for that long breaks the connection. It also bounds
	// Probe's account-info request and the stream lookup that tells a
	// subject without a stream from a server without JetStream. Defaults
	// to DefaultPublishTimeout (10 s).
	PublishTimeout time.Duration

	// DialTimeout bounds connecting to one server, TLS handshake and
	// authentication included. Defaults to DefaultDialTimeout (5 s).
	DialTimeout time.Duration

	// MaxInFlight is the most messages sent on the connection and not yet
	// acknowledged, across all Publish calls of the Publisher: a call
	// waits, within its context, for a free slot before it sends the next
	// message. Defaults to DefaultMaxInFlight (1024).
	MaxInFlight int

	// Logger receives the connection's events (connected, lost, an
	// asynchronous server error such as a permissions violation) and, at
	// Debug level, each acknowledgement the stream marked as a duplicate.
	// Defaults to nil: discarded.
	Logger *slog.Logger
}

const redacted = "[REDACTED]"

// String describes c without secrets.
func (c Config) String() string {
	return fmt.Sprintf("natssink.Config{URLs:%v Name:%s CredentialsFile:%s User:%s Password:%s Token:%s TLS:%t PublishTimeout:%s DialTimeout:%s MaxInFlight:%d}",
		redactURLs(c.URLs), c.Name, c.CredentialsFile, c.User, secret(c.Password), secret(c.Token),
		c.TLS != nil, c.PublishTimeout, c.DialTimeout, c.MaxInFlight)
}

// GoString is like String, so that %#v redacts secrets too.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer: secrets are redacted and the TLS
// configuration is reduced to whether it is set.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("urls", redactURLs(c.URLs)),
		slog.String("name", c.Name),
		slog.String("credentials_file", c.CredentialsFile),
		slog.String("user", c.User),
		slog.String("password", secret(c.Password)),
		slog.String("token", secret(c.Token)),
		slog.Bool("tls", c.TLS != nil),
		slog.Duration("publish_timeout", c.PublishTimeout),
		slog.Duration("dial_timeout", c.DialTimeout),
		slog.Int("max_in_flight", c.MaxInFlight),
	)
}

// secret stands for a secret in descriptions: "" when unset.
func secret(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// redactURLs returns urls with any user information (a password or a
// token) replaced.
func redactURLs(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redactURL(u)
	}
	return out
}

// redactURL returns u with its user information replaced, or a placeholder
// when u does not parse (it may hold a secret in a form url cannot find).
func redactURL(u string) string {
	if !strings.Contains(u, "@") {
		return u
	}
	parsed, err := url.Parse(withScheme(u))
	if err != nil || parsed.User == nil {
		return "[URL with user information, not shown]"
	}
	parsed.User = url.User(redacted)
	return parsed.String()
}

// withScheme adds nats:// to a URL without a scheme, as the client does.
func withScheme(u string) string {
	if strings.Contains(u, "://") {
		return u
	}
	return "nats://" + u
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if len(c.URLs) == 0 {
		c.URLs = []string{DefaultURL}
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	return c
}

// validate reports the first invalid field of c, after withDefaults. The
// error is a *ConfigError naming the field; it never holds a secret.
func (c Config) validate() error {
	for i, u := range c.URLs {
		if err := validateURL(u); err != nil {
			return invalid("URLs", fmt.Sprintf("entry %d (%s): %v", i, redactURL(u), err))
		}
	}
	auth := 0
	for _, set := range []bool{c.CredentialsFile != "", c.User != "" || c.Password != "", c.Token != ""} {
		if set {
			auth++
		}
	}
	switch {
	case auth > 1:
		return invalid("CredentialsFile", "set at most one of a credentials file, a user and password, and a token")
	case c.Password != "" && c.User == "":
		return invalid("User", "a password is set but no user")
	case c.PublishTimeout < 0:
		return invalid("PublishTimeout", "must not be negative")
	case c.DialTimeout < 0:
		return invalid("DialTimeout", "must not be negative")
	case c.MaxInFlight < 0:
		return invalid("MaxInFlight", "must not be negative")
	}
	if c.CredentialsFile != "" {
		if _, err := os.Stat(c.CredentialsFile); err != nil {
			return invalid("CredentialsFile", fmt.Sprintf("cannot read it: %v", err))
		}
	}
	return nil
}

// validateURL checks one server URL as the client will read it.
func validateURL(raw string) error {
	if strings.TrimSpace(raw) != raw || raw == "" {
		return errors.New("empty, or surrounded by white space")
	}
	u, err := url.Parse(withScheme(raw))
	if err != nil {
		return errors.New("not a URL")
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("scheme %q is not nats, tls, ws or wss", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("no host")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not 1-65535", port)
		}
	} else if _, _, err := net.SplitHostPort(u.Host); err == nil {
		return errors.New("empty port")
	}
	return nil
}

func invalid(field, reason string) error {
	return &ConfigError{Field: field, Reason: reason}
}

// ConfigError reports an invalid Config field; it wraps ErrInvalidConfig
// and never holds a secret.
type ConfigError struct {
	// Field is the Config field, e.g. "URLs" or "MaxInFlight".
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

// LoadTLS builds a client TLS configuration from PEM files, for Config.TLS.
//
// caFile, when set, replaces the system roots with the certificates it
// holds. certFile and keyFile, both set or both empty, give the client
// certificate for mutual TLS. With every argument empty it returns a
// configuration that verifies servers against the system roots. The
// minimum version is TLS 1.2.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("nats: read TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("nats: TLS CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("nats: load TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("nats: a TLS client certificate needs both a certificate file and a key file")
	}
	return cfg, nil
}

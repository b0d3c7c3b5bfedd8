package mqttsink

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"time"
)

// Defaults of Config.
const (
	DefaultURL            = "mqtt://127.0.0.1:1883"
	DefaultQoS            = 1
	DefaultPublishTimeout = 10 * time.Second
	DefaultMaxInFlight    = 64
)

// ErrInvalidConfig is wrapped by every *ConfigError.
var ErrInvalidConfig = errors.New("mqttsink: invalid configuration")

// ConfigError is the error of an invalid Config field.
type ConfigError struct {
	Field, Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalidConfig, e.Field, e.Reason)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Config configures a Publisher; the zero value of each field selects its
// default.
type Config struct {
	// URL is the broker's address: mqtt://host:port or tcp://host:port.
	// Defaults to DefaultURL.
	URL string
	// QoS is 1 or 2. Defaults to 1.
	QoS byte
	// ClientID is the MQTT client identifier. A broker takes a session
	// over from the connection with the same id, so each Publisher needs
	// its own. Defaults to "outboxrelay-HOST-PID-" and 8 random hex digits.
	ClientID string
	// Username and Password authenticate; Password is never logged.
	Username, Password string
	// PublishTimeout bounds the wait for one acknowledgement, and a
	// connection attempt. Defaults to 10 s.
	PublishTimeout time.Duration
	// MaxInFlight is the most keys published at a time by one Publish.
	// Defaults to 64.
	MaxInFlight int
	// Logger receives the connection's losses; nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.QoS == 0 {
		c.QoS = DefaultQoS
	}
	if c.ClientID == "" {
		host, _ := os.Hostname()
		c.ClientID = fmt.Sprintf("outboxrelay-%s-%d-%08x", host, os.Getpid(), rand.Uint32())
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate returns every problem of c, joined, each a *ConfigError.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(field, reason string) { errs = append(errs, &ConfigError{Field: field, Reason: reason}) }
	if _, err := c.Address(); err != nil {
		bad("URL", err.Error())
	}
	if c.QoS != 1 && c.QoS != 2 {
		bad("QoS", fmt.Sprintf("%d is not 1 or 2", c.QoS))
	}
	if len(c.ClientID) > 65535 {
		bad("ClientID", "longer than 65,535 bytes")
	}
	if c.Password != "" && c.Username == "" {
		bad("Password", "set without a Username")
	}
	if c.PublishTimeout < 0 {
		bad("PublishTimeout", "must be positive")
	}
	if c.MaxInFlight < 0 {
		bad("MaxInFlight", "must be at least 1")
	}
	return errors.Join(errs...)
}

// Address returns the host:port of c.URL, or why it is not a broker URL.
func (c Config) Address() (string, error) {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return "", fmt.Errorf("not a URL: %w", err)
	case u.Scheme != "mqtt" && u.Scheme != "tcp":
		return "", fmt.Errorf("%q: want mqtt://host:port or tcp://host:port (TLS is not supported yet)", u.Scheme)
	case u.Host == "" || u.Port() == "":
		return "", errors.New("want host and port: mqtt://host:1883")
	case u.User != nil:
		return "", errors.New("put credentials in Username and Password, not in the URL")
	}
	return u.Host, nil
}

// String describes c without its password.
func (c Config) String() string {
	pw := ""
	if c.Password != "" {
		pw = " password=xxxxx"
	}
	return fmt.Sprintf("url=%s qos=%d client_id=%s user=%q%s publish_timeout=%v max_in_flight=%d",
		c.URL, c.QoS, c.ClientID, c.Username, pw, c.PublishTimeout, c.MaxInFlight)
}

package webhook

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/stdwebhooks"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultTimeout is the default Config.Timeout. The Standard Webhooks
	// specification recommends 15 to 30 seconds, so that receivers have
	// time to process a request before they answer.
	DefaultTimeout = 15 * time.Second
	// DefaultDialTimeout is the default Config.DialTimeout.
	DefaultDialTimeout = 5 * time.Second
	// DefaultMaxInFlight is the default Config.MaxInFlight.
	DefaultMaxInFlight = 16
	// DefaultContentType is the default Config.ContentType.
	DefaultContentType = "application/json"
)

// TopicPlaceholder is replaced in Config.URL by the message's topic.
const TopicPlaceholder = "{topic}"

// Config configures a Publisher. Only URL is required; every other field
// has a documented default that its zero value selects.
//
// Config redacts Secrets, the values of Headers and the password of a URL
// when formatted with %v or logged with log/slog; errors returned by New,
// Publish and Probe never contain a secret or a header value of Headers.
type Config struct {
	// URL is the endpoint every message is POSTed to: an absolute http or
	// https URL in which each "{topic}" (TopicPlaceholder) is replaced by
	// the message's topic, path-escaped in the path and query-escaped in
	// the query, e.g. "https://hooks.example.com/events/{topic}". The
	// placeholder may appear only in the path and the query, never in the
	// scheme or host, so that every message goes to the same host; a URL
	// without it sends every topic to one URL (the topic is in the
	// Outbox-Topic header). A fragment is refused. Required.
	URL string

	// Secrets sign every request as the Standard Webhooks specification
	// says: each is "whsec_" followed by the base64 of a key of at least
	// 24 bytes, and each adds one "v1,<signature>" to the webhook-signature
	// header, so that a receiver can rotate its secret (sign with the old
	// and the new one until it has switched). Defaults to none: requests
	// carry webhook-id and webhook-timestamp but no webhook-signature.
	Secrets []string

	// Timeout bounds one request: connecting, sending and reading the
	// answer. A request without an answer by then fails transiently.
	// Defaults to DefaultTimeout (15 s).
	Timeout time.Duration

	// DialTimeout bounds connecting to the host, the TLS handshake
	// included; within Timeout. A host that cannot be reached in time
	// makes the sink unavailable. Defaults to DefaultDialTimeout (5 s).
	DialTimeout time.Duration

	// MaxInFlight is the most requests the publisher has open at once,
	// across all its Publish calls. Each key has at most one request in
	// flight; different keys, and messages without a key, go in parallel
	// up to this bound. Defaults to DefaultMaxInFlight (16).
	MaxInFlight int

	// ContentType is the Content-Type of every request. Defaults to
	// DefaultContentType ("application/json").
	ContentType string

	// Headers are added to every request, e.g. {"Authorization": "Bearer
	// ..."}. Names must be HTTP tokens and may not be one the sink sets
	// (Content-Type, webhook-*, Outbox-*, Idempotency-Key) or one that
	// frames the request (Host, Content-Length, Transfer-Encoding,
	// Connection, ...). Values are never logged. Defaults to none.
	Headers map[string]string

	// ProbeURL, when set, is what Probe asks: a GET that must answer 2xx
	// (a health endpoint of the receiver). Defaults to "": Probe asks URL's
	// host "OPTIONS *", which touches no resource, and takes any answer but
	// 502, 503 and 504.
	ProbeURL string

	// TLS is the client TLS configuration for https URLs; LoadTLS builds
	// one from files. Defaults to nil: the system roots, TLS 1.2 or later.
	TLS *tls.Config
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.ContentType == "" {
		c.ContentType = DefaultContentType
	}
	return c
}

// validate returns every invalid field of c, after withDefaults: nil, or
// an errors.Join of *ConfigError values, one per field, which never hold a
// secret or a header value.
func (c Config) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if _, err := parseTemplate(c.URL); err != nil {
		bad("URL", "%v", err)
	}
	for i, s := range c.Secrets {
		if _, err := stdwebhooks.ParseSecret(s); err != nil {
			bad("Secrets", "entry %d: %v", i+1, err)
		}
	}
	if c.Timeout < 0 {
		bad("Timeout", "must not be negative")
	}
	if c.DialTimeout < 0 {
		bad("DialTimeout", "must not be negative")
	}
	if c.MaxInFlight < 0 {
		bad("MaxInFlight", "must not be negative")
	}
	if mt, _, err := mime.ParseMediaType(c.ContentType); err != nil || !strings.Contains(mt, "/") || !validValue(c.ContentType) {
		bad("ContentType", "%q is not a media type such as application/json", c.ContentType)
	}
	canonical := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(c.Headers)) {
		other, dup := canonical[http.CanonicalHeaderKey(name)]
		canonical[http.CanonicalHeaderKey(name)] = name
		switch {
		case dup:
			bad("Headers", "%q and %q differ only in case: HTTP names are case-insensitive", other, name)
		case !validToken(name):
			bad("Headers", "%q is not a valid header name", name)
		case reservedHeader(name):
			bad("Headers", "%q is a header the sink sets itself or one that frames the request", name)
		case !validValue(c.Headers[name]):
			bad("Headers", "the value of %q holds a control character", name) // not the value: it may be a token
		}
	}
	if c.ProbeURL != "" {
		if _, err := parseEndpoint(c.ProbeURL); err != nil {
			bad("ProbeURL", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// reservedHeader reports whether name (any case) is set by the sink or
// frames the request, and so may not be one of Config.Headers.
func reservedHeader(name string) bool {
	name = http.CanonicalHeaderKey(name)
	if strings.HasPrefix(name, "Outbox-") || strings.HasPrefix(name, "Webhook-") {
		return true
	}
	switch name {
	case "Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding", "Host",
		"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade", "Expect",
		headerIdempotencyKey:
		return true
	}
	return false
}

// ConfigError reports an invalid Config field; it wraps ErrInvalidConfig
// and never holds a secret or a header value.
type ConfigError struct {
	// Field is the Config field, e.g. "URL" or "Secrets".
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

const redacted = "[REDACTED]"

// String describes c without secrets.
func (c Config) String() string {
	return fmt.Sprintf("webhook.Config{URL:%s Secrets:%s Timeout:%s DialTimeout:%s MaxInFlight:%d ContentType:%s Headers:%s ProbeURL:%s TLS:%t}",
		redactURL(c.URL), secretsSummary(c.Secrets), c.Timeout, c.DialTimeout, c.MaxInFlight,
		c.ContentType, headerNames(c.Headers), redactURL(c.ProbeURL), c.TLS != nil)
}

// GoString is like String, so that %#v redacts secrets too.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer: secrets and header values are
// redacted, a URL's password too, and the TLS configuration is reduced to
// whether it is set.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", redactURL(c.URL)),
		slog.String("secrets", secretsSummary(c.Secrets)),
		slog.Duration("timeout", c.Timeout),
		slog.Duration("dial_timeout", c.DialTimeout),
		slog.Int("max_in_flight", c.MaxInFlight),
		slog.String("content_type", c.ContentType),
		slog.String("headers", headerNames(c.Headers)),
		slog.String("probe_url", redactURL(c.ProbeURL)),
		slog.Bool("tls", c.TLS != nil),
	)
}

// secretsSummary says how many secrets there are, not what they are.
func secretsSummary(secrets []string) string {
	if len(secrets) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d %s", len(secrets), redacted)
}

// headerNames lists the names of h, sorted, each with a redacted value.
func headerNames(h map[string]string) string {
	if len(h) == 0 {
		return "none"
	}
	names := slices.Sorted(maps.Keys(h))
	for i, n := range names {
		names[i] = n + ": " + redacted
	}
	return "{" + strings.Join(names, ", ") + "}"
}

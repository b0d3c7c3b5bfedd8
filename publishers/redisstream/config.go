package redisstream

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultURL is the default Config.URL: database 0 of a Redis on this
	// machine.
	DefaultURL = "redis://127.0.0.1:6379/0"
	// DefaultWaitTimeout is the default Config.WaitTimeout.
	DefaultWaitTimeout = time.Second
	// DefaultMaxMessageBytes is the default Config.MaxMessageBytes: 512 MiB,
	// Redis' default proto-max-bulk-len. Redis refuses a longer argument by
	// closing the connection, which would fail the whole batch as an outage
	// again and again; the sink refuses such a message on its own instead.
	DefaultMaxMessageBytes = 512 << 20
	// DefaultDialTimeout is the default Config.DialTimeout.
	DefaultDialTimeout = 5 * time.Second
	// DefaultTimeout is the default Config.Timeout.
	DefaultTimeout = 10 * time.Second
	// DefaultPoolSize is the default Config.PoolSize.
	DefaultPoolSize = 10
	// DefaultClientName is the default Config.ClientName.
	DefaultClientName = "outboxrelay"
	// MaxStreamKeyLen is the longest stream key (StreamPrefix and topic
	// together) Publish accepts, in bytes.
	MaxStreamKeyLen = 1024
)

// Config configures a Publisher. Every field has a documented default that
// its zero value selects.
//
// Config redacts the password (of URL and of Password) when formatted with
// %v or logged with log/slog; errors returned by New and Publish never
// contain it.
type Config struct {
	// URL locates the Redis server: redis://[user[:password]@]host[:port][/db]
	// for plain TCP, rediss://... for TLS (verified against the system
	// roots unless TLS says otherwise), or unix://[user[:password]@]/path/to/redis.sock.
	// Query parameters are refused: the fields below set what they would.
	// Defaults to DefaultURL (redis://127.0.0.1:6379/0).
	URL string

	// Password, when set, replaces the password of URL, so that the URL
	// can be logged or shown without it. It is never logged or put in
	// errors. Defaults to "": URL's password, if any.
	Password string

	// StreamPrefix is put before each message's Topic to name its stream:
	// the stream key is StreamPrefix + Topic ("events:" + "orders" =
	// "events:orders"). Defaults to "": the stream key is the topic.
	StreamPrefix string

	// MaxLen, when positive, trims each stream to about that many entries
	// as entries are added (XADD MAXLEN ~ MaxLen): Redis drops the oldest
	// entries in whole macro nodes, so a stream may hold somewhat more.
	// Entries consumers have not read yet are trimmed alike. Defaults to 0:
	// streams are never trimmed by the sink.
	MaxLen int64

	// WaitReplicas, when positive, makes each Publish wait, after its
	// XADDs, until that many replicas acknowledged them (WAIT
	// WaitReplicas WaitTimeout on the same connection). Fewer
	// acknowledgements within WaitTimeout fail every message of the call
	// with a transient error (ErrNotReplicated): the relay publishes them
	// again later. Defaults to 0: no WAIT; the master's reply acknowledges.
	WaitReplicas int

	// WaitTimeout bounds WAIT. It has no effect without WaitReplicas.
	// Defaults to DefaultWaitTimeout (1 s).
	WaitTimeout time.Duration

	// MaxMessageBytes is the largest entry Publish sends, counting its
	// field names and values (event id, key, payload, headers as JSON,
	// creation time). A larger message fails permanently, alone, without
	// reaching Redis. Defaults to DefaultMaxMessageBytes (512 MiB).
	MaxMessageBytes int

	// DialTimeout bounds establishing a connection, TLS handshake and
	// authentication included. Defaults to DefaultDialTimeout (5 s).
	DialTimeout time.Duration

	// Timeout bounds each read and write on a connection, so that a Redis
	// that stopped answering fails a Publish whose context has no earlier
	// deadline. WaitTimeout is added to it for the replies of a Publish
	// with WAIT. Defaults to DefaultTimeout (10 s).
	Timeout time.Duration

	// PoolSize is the most connections the publisher keeps open; each
	// Publish call uses one for the whole call. Defaults to
	// DefaultPoolSize (10).
	PoolSize int

	// ClientName is the name the connections give themselves (CLIENT
	// SETNAME), shown by CLIENT LIST. Defaults to DefaultClientName
	// ("outboxrelay").
	ClientName string

	// TLS, when non-nil, makes connections use TLS with this client
	// configuration (LoadTLS builds one from files), whatever URL's
	// scheme. When its ServerName is empty, URL's host name is used.
	// Defaults to nil: TLS only with a rediss:// URL.
	TLS *tls.Config
}

const redacted = "[REDACTED]"

// redactedURL returns u with its password replaced, or a placeholder when
// u does not parse (it may hold the password anywhere).
func redactedURL(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return "[unparsable URL]"
	}
	return parsed.Redacted()
}

// String describes c without secrets.
func (c Config) String() string {
	pw := ""
	if c.Password != "" {
		pw = redacted
	}
	return fmt.Sprintf("redisstream.Config{URL:%s Password:%s StreamPrefix:%q MaxLen:%d WaitReplicas:%d WaitTimeout:%s MaxMessageBytes:%d DialTimeout:%s Timeout:%s PoolSize:%d ClientName:%s TLS:%t}",
		redactedURL(c.URL), pw, c.StreamPrefix, c.MaxLen, c.WaitReplicas, c.WaitTimeout, c.MaxMessageBytes,
		c.DialTimeout, c.Timeout, c.PoolSize, c.ClientName, c.TLS != nil)
}

// GoString is like String, so that %#v redacts secrets too.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer: the passwords are redacted and the
// TLS configuration is reduced to whether it is set.
func (c Config) LogValue() slog.Value {
	pw := ""
	if c.Password != "" {
		pw = redacted
	}
	return slog.GroupValue(
		slog.String("url", redactedURL(c.URL)),
		slog.String("password", pw),
		slog.String("stream_prefix", c.StreamPrefix),
		slog.Int64("maxlen", c.MaxLen),
		slog.Int("wait_replicas", c.WaitReplicas),
		slog.Duration("wait_timeout", c.WaitTimeout),
		slog.Int("max_message_bytes", c.MaxMessageBytes),
		slog.Duration("dial_timeout", c.DialTimeout),
		slog.Duration("timeout", c.Timeout),
		slog.Int("pool_size", c.PoolSize),
		slog.String("client_name", c.ClientName),
		slog.Bool("tls", c.TLS != nil),
	)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize
	}
	if c.ClientName == "" {
		c.ClientName = DefaultClientName
	}
	return c
}

// validate reports every invalid field of c, after withDefaults, joined;
// each is a *ConfigError (wrapping ErrInvalidConfig) naming the field. No
// error holds a password.
func (c Config) validate() error {
	var errs []error
	bad := func(field, reason string) { errs = append(errs, invalid(field, reason)) }
	if _, err := c.options(); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			errs = append(errs, ce)
		} else {
			bad("URL", err.Error())
		}
	}
	if err := validStreamKey(c.StreamPrefix, true); err != nil {
		bad("StreamPrefix", err.Error())
	}
	if c.MaxLen < 0 {
		bad("MaxLen", "must not be negative (0 turns trimming off)")
	}
	if c.WaitReplicas < 0 {
		bad("WaitReplicas", "must not be negative (0 turns WAIT off)")
	}
	switch {
	case c.WaitTimeout < 0:
		bad("WaitTimeout", "must not be negative")
	case c.WaitTimeout > 0 && c.WaitTimeout < time.Millisecond:
		bad("WaitTimeout", "must be at least 1ms: WAIT counts in milliseconds, and 0 would wait forever")
	}
	if c.MaxMessageBytes < 0 {
		bad("MaxMessageBytes", "must not be negative")
	}
	if c.DialTimeout < 0 {
		bad("DialTimeout", "must not be negative")
	}
	if c.Timeout < 0 {
		bad("Timeout", "must not be negative")
	}
	if c.PoolSize < 0 {
		bad("PoolSize", "must not be negative")
	}
	if strings.ContainsAny(c.ClientName, " \t\r\n") {
		bad("ClientName", "must not contain spaces or line breaks (CLIENT SETNAME refuses them)")
	}
	return errors.Join(errs...)
}

// options builds go-redis' options from c (after withDefaults). Its
// errors never hold the password: URL parsing errors quote the URL, so
// only their cause is kept.
func (c Config) options() (*redis.Options, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, invalid("URL", "not a valid URL: "+err.Error())
	}
	switch u.Scheme {
	case "redis", "rediss", "unix":
	default:
		return nil, invalid("URL", fmt.Sprintf("scheme %q is not redis, rediss or unix", u.Scheme))
	}
	if u.RawQuery != "" {
		return nil, invalid("URL", "query parameters are not accepted; use the Config fields (the --redis-* flags) instead")
	}
	if u.Scheme != "unix" && u.Host == "" {
		return nil, invalid("URL", "no host")
	}
	opts, err := redis.ParseURL(c.URL)
	if err != nil {
		// go-redis' messages name the scheme, the path or the database
		// number, never the user info.
		return nil, invalid("URL", strings.TrimPrefix(err.Error(), "redis: "))
	}
	if c.Password != "" {
		opts.Password = c.Password
	}
	if c.TLS != nil {
		opts.TLSConfig = c.TLS.Clone()
		if opts.TLSConfig.ServerName == "" && u.Scheme != "unix" {
			opts.TLSConfig.ServerName = u.Hostname()
		}
	}
	opts.ClientName = c.ClientName
	opts.DialTimeout = c.DialTimeout
	opts.DialerRetries = 1 // one dial per connection: the relay retries, with backoff
	opts.ReadTimeout = c.Timeout
	if c.WaitReplicas > 0 {
		opts.ReadTimeout += c.WaitTimeout
	}
	opts.WriteTimeout = c.Timeout
	opts.PoolTimeout = c.Timeout
	opts.PoolSize = c.PoolSize
	// Deadlines of a call's context bound its reads and writes.
	opts.ContextTimeoutEnabled = true
	// go-redis would send a failed pipeline again, XADDs included, which
	// appends them twice when the first try reached Redis: the relay
	// retries instead, knowing what was acknowledged.
	opts.MaxRetries = -1
	opts.Protocol = 3
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opts, nil
}

func invalid(field, reason string) error {
	return &ConfigError{Field: field, Reason: reason}
}

// ConfigError reports an invalid Config field; it wraps ErrInvalidConfig
// and never holds a password.
type ConfigError struct {
	// Field is the Config field, e.g. "URL" or "MaxLen".
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

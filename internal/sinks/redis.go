package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
	"github.com/outboxrelay/outboxrelay/relay"
)

// redisSink appends to Redis streams (publishers/redisstream); its flags
// are --redis-*.
func init() { register(redisSink) }

var redisSink = Sink{
	Name:        "redis",
	CloudEvents: cloudevents.RedisStreams,
	About:       "Redis streams, one XADD per event",
	Flags: func(f Flags) Settings {
		r := &redisFlags{}
		r.register(f)
		return r
	},
}

// redisFlags are the Redis sink's flags.
type redisFlags struct {
	cfg redisstream.Config // built by check

	url, password, streamPrefix, clientName string
	maxLen, waitReplicas, maxMessageBytes   int
	poolSize                                int
	waitTimeout, dialTimeout, timeout       time.Duration
	tls, tlsInsecure                        bool
	tlsCA, tlsCert, tlsKey                  string
}

func (r *redisFlags) register(f Flags) {
	f.String(&r.url, "redis-url", redisstream.DefaultURL, "Redis server: redis://[user[:password]@]host[:port][/db], rediss://... for TLS, or unix:///path/to/redis.sock; no query parameters")
	f.String(&r.password, "redis-password", "", "Redis password, replacing the URL's (prefer the environment variable; never logged)")
	f.String(&r.streamPrefix, "redis-stream-prefix", "", "put before each topic to name its stream: the stream key is prefix+topic")
	f.Int(&r.maxLen, "redis-maxlen", 0, "trim each stream to about this many entries as events are added (XADD MAXLEN ~); 0 never trims")
	f.Int(&r.waitReplicas, "redis-wait-replicas", 0, "after each batch, WAIT until this many replicas acknowledged it; fewer within --redis-wait-timeout retries the batch; 0 does not wait")
	f.Duration(&r.waitTimeout, "redis-wait-timeout", redisstream.DefaultWaitTimeout, "how long WAIT waits for --redis-wait-replicas")
	f.Int(&r.maxMessageBytes, "redis-max-message-bytes", redisstream.DefaultMaxMessageBytes, "largest stream entry (fields and values) sent; a larger event fails permanently")
	f.Duration(&r.dialTimeout, "redis-dial-timeout", redisstream.DefaultDialTimeout, "bound on connecting to Redis, TLS and authentication included")
	f.Duration(&r.timeout, "redis-timeout", redisstream.DefaultTimeout, "bound on each read and write of a connection")
	f.Int(&r.poolSize, "redis-pool-size", redisstream.DefaultPoolSize, "most connections to Redis; each publish uses one")
	f.String(&r.clientName, "redis-client-name", redisstream.DefaultClientName, "connection name shown by CLIENT LIST")
	f.Bool(&r.tls, "redis-tls", false, "connect with TLS (as a rediss:// URL does)")
	f.String(&r.tlsCA, "redis-tls-ca", "", "PEM file of the CA that signed the server's certificate (default: system roots); implies --redis-tls")
	f.String(&r.tlsCert, "redis-tls-cert", "", "PEM client certificate for mutual TLS; implies --redis-tls")
	f.String(&r.tlsKey, "redis-tls-key", "", "PEM private key of --redis-tls-cert")
	f.Bool(&r.tlsInsecure, "redis-tls-insecure-skip-verify", false, "do not verify the server's certificate (testing only)")
}

// check builds the redisstream.Config and reports every problem of the
// flags, naming each flag.
func (r *redisFlags) Check(relay.Config) error {
	var errs problems
	cfg := redisstream.Config{
		URL:             r.url,
		Password:        r.password,
		StreamPrefix:    r.streamPrefix,
		MaxLen:          int64(r.maxLen),
		WaitReplicas:    r.waitReplicas,
		WaitTimeout:     r.waitTimeout,
		MaxMessageBytes: r.maxMessageBytes,
		DialTimeout:     r.dialTimeout,
		Timeout:         r.timeout,
		PoolSize:        r.poolSize,
		ClientName:      r.clientName,
	}
	if r.tls || r.tlsCA != "" || r.tlsCert != "" || r.tlsKey != "" || r.tlsInsecure {
		tlsCfg, err := redisstream.LoadTLS(r.tlsCA, r.tlsCert, r.tlsKey, r.tlsInsecure)
		if err != nil {
			errs.add(usage("invalid TLS files (--redis-tls-ca, --redis-tls-cert, --redis-tls-key): %v", err))
		}
		cfg.TLS = tlsCfg
	}
	// The flags' zero values mean "the default" to redisstream, but not
	// here: a 0 the user gave where 0 is no setting is refused by name.
	for _, f := range []struct {
		name string
		zero bool
	}{
		{"redis-wait-timeout", r.waitTimeout == 0}, {"redis-max-message-bytes", r.maxMessageBytes == 0},
		{"redis-dial-timeout", r.dialTimeout == 0}, {"redis-timeout", r.timeout == 0}, {"redis-pool-size", r.poolSize == 0},
	} {
		if f.zero {
			errs.add(usage("invalid value for --%s (%s): must be positive", f.name, EnvName(f.name)))
		}
	}
	if p, err := redisstream.New(cfg); err != nil {
		errs.add(redisUsage(err))
	} else {
		_ = p.Close() // it did not connect
	}
	r.cfg = cfg
	return errs.err()
}

// open returns the Redis publisher and logs its configuration (passwords
// redacted). go-redis' own log lines go to logger at Debug level.
func (r *redisFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	redisstream.SetClientLogger(logger)
	p, err := redisstream.New(r.cfg)
	if err != nil {
		return nil, redisUsage(err)
	}
	logger.Info("redis sink", "config", p.Config())
	return p, nil
}

// redisConfigFlag maps redisstream.Config fields to the flags that set
// them.
var redisConfigFlag = map[string]string{
	"URL": "redis-url", "StreamPrefix": "redis-stream-prefix", "MaxLen": "redis-maxlen",
	"WaitReplicas": "redis-wait-replicas", "WaitTimeout": "redis-wait-timeout",
	"MaxMessageBytes": "redis-max-message-bytes", "DialTimeout": "redis-dial-timeout",
	"Timeout": "redis-timeout", "PoolSize": "redis-pool-size", "ClientName": "redis-client-name",
}

// redisUsage turns the error of redisstream.New, which holds one
// *ConfigError per invalid field, into usage errors naming the flags.
func redisUsage(err error) error {
	var errs problems
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	for _, e := range list {
		var ce *redisstream.ConfigError
		if errors.As(e, &ce) && redisConfigFlag[ce.Field] != "" {
			name := redisConfigFlag[ce.Field]
			errs.add(invalid(name, ce.Reason))
			continue
		}
		errs.add(usage("invalid Redis configuration: %v", e))
	}
	return errs.err()
}

// redisReader reads the stream --redis-stream-prefix+topic (the sink's
// first XADD creates it) with XREAD from its first entry. It connects at
// its first Prepare.
type redisReader struct {
	f   *redisFlags
	rdb *redis.Client
}

// Reader returns a Reader of the server of --redis-url.
func (r *redisFlags) Reader() (Reader, error) { return &redisReader{f: r}, nil }

// Prepare deletes the stream if an earlier run left it.
func (r *redisReader) Prepare(ctx context.Context, topic string) (string, error) {
	opts, err := redis.ParseURL(r.f.url)
	if err != nil {
		return "", fmt.Errorf("redis: %w", err)
	}
	if r.rdb == nil {
		if r.f.password != "" {
			opts.Password = r.f.password
		}
		opts.ClientName = "outboxrelay-reader"
		r.rdb = redis.NewClient(opts)
	}
	if err := r.Remove(ctx, topic); err != nil {
		return "", fmt.Errorf("cannot reach Redis at %s (start redis-server, or pass --redis-url): %w", opts.Addr, err)
	}
	return fmt.Sprintf("redis:    %s, stream %s", opts.Addr, r.f.streamPrefix+topic), nil
}

// Read reads with XREAD, up to 10,000 entries at a time; with follow it
// blocks up to 250ms for the next (go-redis does not break off a blocked
// read when ctx ends).
func (r *redisReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	if ready != nil {
		ready() // XREAD from the start of the stream misses nothing
	}
	stream, last, n := r.f.streamPrefix+topic, "0-0", int64(0)
	block := time.Duration(-1) // no BLOCK: stop at the end
	if follow {
		block = 250 * time.Millisecond
	}
	for {
		res, err := r.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, last}, Count: 10000, Block: block}).Result()
		switch {
		case ctx.Err() != nil && follow:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, redis.Nil) && follow:
			continue
		case errors.Is(err, redis.Nil):
			return nil
		case err != nil:
			return fmt.Errorf("redis: read %s after %s: %w", stream, last, err)
		}
		for _, s := range res {
			for _, e := range s.Messages {
				ms, _, _ := strings.Cut(e.ID, "-") // the server's clock when it appended the entry
				at, _ := strconv.ParseInt(ms, 10, 64)
				got(Record{EventID: field(e.Values, redisstream.FieldEventID), Key: field(e.Values, redisstream.FieldKey),
					Payload: field(e.Values, redisstream.FieldPayload), Offset: n, Time: time.UnixMilli(at)})
				last, n = e.ID, n+1
			}
		}
	}
}

// field is an entry's field as a string, "" when it has none.
func field(values map[string]any, name string) string {
	s, _ := values[name].(string)
	return s
}

// Remove deletes the stream.
func (r *redisReader) Remove(ctx context.Context, topic string) error {
	if err := r.rdb.Del(ctx, r.f.streamPrefix+topic).Err(); err != nil {
		return fmt.Errorf("redis: delete stream %s: %w", r.f.streamPrefix+topic, err)
	}
	return nil
}

// Close disconnects.
func (r *redisReader) Close() error {
	if r.rdb == nil {
		return nil
	}
	return r.rdb.Close()
}

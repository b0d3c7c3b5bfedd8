package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
	"github.com/outboxrelay/outboxrelay/relay"
)

// natsSink publishes to NATS JetStream streams (publishers/nats); its
// flags are --nats-*.
func init() { register(natsSink) }

var natsSink = Sink{
	Name:        "nats",
	CloudEvents: cloudevents.NATS,
	About:       "NATS JetStream",
	Flags: func(f Flags) Settings {
		n := &natsFlags{}
		n.register(f)
		return n
	},
}

// natsFlags are the NATS sink's flags.
type natsFlags struct {
	cfg natssink.Config // built by check

	url, creds, user, password, token string
	tlsCA, tlsCert, tlsKey            string
	publishTimeout                    time.Duration
	maxInFlight                       int
}

func (n *natsFlags) register(f Flags) {
	f.String(&n.url, "nats-url", natssink.DefaultURL, "comma-separated NATS server URLs, nats://host:port (tls://, ws://, wss:// too); one connection, to one of them")
	f.String(&n.creds, "nats-creds", "", "NATS credentials file (user JWT and NKey seed)")
	f.String(&n.user, "nats-user", "", "NATS user name")
	f.String(&n.password, "nats-password", "", "NATS password of --nats-user (prefer the environment variable; never logged)")
	f.String(&n.token, "nats-token", "", "NATS authentication token (prefer the environment variable; never logged)")
	f.String(&n.tlsCA, "nats-tls-ca", "", "PEM file of the CA that signed the servers' certificates (default: system roots); turns TLS on")
	f.String(&n.tlsCert, "nats-tls-cert", "", "PEM client certificate for mutual TLS; turns TLS on")
	f.String(&n.tlsKey, "nats-tls-key", "", "PEM private key of --nats-tls-cert")
	f.Duration(&n.publishTimeout, "nats-publish-timeout", natssink.DefaultPublishTimeout, "how long a message waits for its stream's acknowledgement before it fails as unavailable")
	f.Int(&n.maxInFlight, "nats-max-in-flight", natssink.DefaultMaxInFlight, "most messages sent and not yet acknowledged at a time, across the relay's workers")
}

// check builds the natssink.Config and reports every problem of the flags,
// naming each flag.
func (n *natsFlags) Check(relay.Config) error {
	var errs problems
	cfg := natssink.Config{
		URLs:            splitList(n.url),
		CredentialsFile: n.creds,
		User:            n.user,
		Password:        n.password,
		Token:           n.token,
		PublishTimeout:  n.publishTimeout,
		MaxInFlight:     n.maxInFlight,
	}
	if len(cfg.URLs) == 0 {
		errs.add(usage("--nats-url (%s) is required with --sink nats: a comma-separated list of nats://host:port", EnvName("nats-url")))
	}
	if n.publishTimeout <= 0 {
		errs.add(usage("invalid value for --nats-publish-timeout (%s): %v is not a positive duration", EnvName("nats-publish-timeout"), n.publishTimeout))
	}
	if n.maxInFlight <= 0 {
		errs.add(usage("invalid value for --nats-max-in-flight (%s): %d is not at least 1", EnvName("nats-max-in-flight"), n.maxInFlight))
	}
	if n.tlsCA != "" || n.tlsCert != "" || n.tlsKey != "" {
		tlsCfg, err := natssink.LoadTLS(n.tlsCA, n.tlsCert, n.tlsKey)
		if err != nil {
			errs.add(usage("invalid TLS files (--nats-tls-ca, --nats-tls-cert, --nats-tls-key): %v", err))
		}
		cfg.TLS = tlsCfg
	}
	check := cfg // without what is reported above
	if n.publishTimeout <= 0 {
		check.PublishTimeout = 0
	}
	if n.maxInFlight <= 0 {
		check.MaxInFlight = 0
	}
	for _, err := range natsProblems(check) {
		errs.add(natsUsage(err))
	}
	n.cfg = cfg
	return errs.err()
}

// open returns the NATS publisher and logs its configuration (secrets
// redacted). It does not connect: the first publish or probe does.
func (n *natsFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	cfg := n.cfg
	cfg.Logger = logger
	p, err := natssink.New(cfg)
	if err != nil {
		return nil, natsUsage(err)
	}
	logger.Info("nats sink", "config", p.Config())
	return p, nil
}

// natsProblems returns every error natssink.New finds in cfg, not only
// the first: each refused field is set back to its default and cfg is
// checked again. New does not connect.
func natsProblems(cfg natssink.Config) []error {
	var out []error
	seen := map[string]bool{}
	for {
		p, err := natssink.New(cfg)
		if err == nil {
			_ = p.Close()
			return out
		}
		var ce *natssink.ConfigError
		if !errors.As(err, &ce) || seen[ce.Field] {
			return append(out, err)
		}
		out, seen[ce.Field] = append(out, err), true
		switch ce.Field {
		case "URLs":
			cfg.URLs = nil
		case "CredentialsFile", "User":
			cfg.CredentialsFile, cfg.User, cfg.Password, cfg.Token = "", "", "", ""
		case "PublishTimeout":
			cfg.PublishTimeout = 0
		case "MaxInFlight":
			cfg.MaxInFlight = 0
		default:
			return out
		}
	}
}

// natsConfigFlag maps natssink.Config fields to the flags that set them.
var natsConfigFlag = map[string]string{
	"URLs": "nats-url", "User": "nats-user", "PublishTimeout": "nats-publish-timeout", "MaxInFlight": "nats-max-in-flight",
}

// natsUsage turns an error of natssink.New into a usage error naming the
// flag. The error holds no secret.
func natsUsage(err error) error {
	var ce *natssink.ConfigError
	switch {
	case !errors.As(err, &ce):
	case ce.Field == "CredentialsFile" && strings.Contains(ce.Reason, "at most one"):
		return usage("--nats-creds (%s), --nats-user (%s) with --nats-password (%s), and --nats-token (%s): %s",
			EnvName("nats-creds"), EnvName("nats-user"), EnvName("nats-password"), EnvName("nats-token"), ce.Reason)
	case ce.Field == "CredentialsFile":
		return usage("invalid value for --nats-creds (%s): %s", EnvName("nats-creds"), ce.Reason)
	case natsConfigFlag[ce.Field] != "":
		name := natsConfigFlag[ce.Field]
		return invalid(name, ce.Reason)
	}
	return usage("invalid NATS configuration: %v", err)
}

// natsReader reads JetStream streams, one per topic capturing it as its
// subject, with ordered consumers. It connects with the sink's URL and
// credentials at its first Prepare.
type natsReader struct {
	f  *natsFlags
	nc *nats.Conn
	js jetstream.JetStream
}

// Reader returns a Reader of the servers of --nats-url.
func (n *natsFlags) Reader() (Reader, error) { return &natsReader{f: n}, nil }

// natsStream names topic's stream: OUTBOX_ and topic's letters and digits,
// '_' for the rest.
func natsStream(topic string) string {
	return "OUTBOX_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, topic)
}

// Prepare creates the stream that captures the subject topic, file
// storage, the server's defaults otherwise.
func (r *natsReader) Prepare(ctx context.Context, topic string) (string, error) {
	if r.nc == nil {
		opts := []nats.Option{nats.Name("outboxrelay-reader"), nats.Timeout(5 * time.Second)}
		switch f := r.f; {
		case f.creds != "":
			opts = append(opts, nats.UserCredentials(f.creds))
		case f.user != "":
			opts = append(opts, nats.UserInfo(f.user, f.password))
		case f.token != "":
			opts = append(opts, nats.Token(f.token))
		}
		nc, err := nats.Connect(r.f.url, opts...)
		if err != nil {
			return "", fmt.Errorf("cannot reach NATS at %s (start nats-server -js, or pass --nats-url): %w", r.f.url, err)
		}
		if r.js, err = jetstream.New(nc); err != nil {
			nc.Close()
			return "", fmt.Errorf("nats: %w", err)
		}
		r.nc = nc
	}
	name := natsStream(topic)
	if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{topic}, Storage: jetstream.FileStorage}); err != nil {
		return "", fmt.Errorf("nats: create stream %s capturing %s (is JetStream enabled: nats-server -js?): %w", name, topic, err)
	}
	return fmt.Sprintf("nats:     %s, JetStream stream %s capturing subject %s", r.nc.ConnectedUrlRedacted(), name, topic), nil
}

// natsReadIdle bounds a read to the end that makes no progress.
const natsReadIdle = 10 * time.Second

func (r *natsReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	name := natsStream(topic)
	var want uint64
	if !follow {
		s, err := r.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("nats: stream %s: %w", name, err)
		}
		if want = s.CachedInfo().State.Msgs; want == 0 {
			return nil
		}
	}
	cons, err := r.js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("nats: consumer of stream %s: %w", name, err)
	}
	var read atomic.Uint64
	progress := make(chan struct{}, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		h := m.Headers()
		key, _ := natssink.Key(h) // a bad key header arrives as a wrong key
		rec := Record{EventID: h.Get(outbox.HeaderEventID), Key: string(key), Payload: string(m.Data()), Time: time.Now()}
		if meta, err := m.Metadata(); err == nil {
			rec.Offset, rec.Time = int64(meta.Sequence.Stream), meta.Timestamp
		}
		got(rec)
		read.Add(1)
		select {
		case progress <- struct{}{}:
		default:
		}
	}, jetstream.PullMaxMessages(1000))
	if err != nil {
		return fmt.Errorf("nats: consume stream %s: %w", name, err)
	}
	defer func() { cc.Stop(); <-cc.Closed() }()
	if ready != nil {
		ready()
	}
	if follow {
		<-ctx.Done()
		return nil
	}
	idle := time.NewTimer(natsReadIdle)
	defer idle.Stop()
	for read.Load() < want {
		select {
		case <-progress:
			idle.Reset(natsReadIdle)
		case <-idle.C:
			return fmt.Errorf("nats: read %d of the %d messages of stream %s, then nothing for %v", read.Load(), want, name, natsReadIdle)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Remove deletes topic's stream.
func (r *natsReader) Remove(ctx context.Context, topic string) error {
	if err := r.js.DeleteStream(ctx, natsStream(topic)); err != nil {
		return fmt.Errorf("nats: delete stream %s: %w", natsStream(topic), err)
	}
	return nil
}

// Close disconnects.
func (r *natsReader) Close() error {
	if r.nc != nil {
		r.nc.Close()
	}
	return nil
}

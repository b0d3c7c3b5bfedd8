package sinks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
	"github.com/outboxrelay/outboxrelay/relay"
)

// rabbitmqSink publishes to RabbitMQ (publishers/rabbitmq); its flags are
// --rabbitmq-*.
func init() { register(rabbitmqSink) }

var rabbitmqSink = Sink{
	Name:  "rabbitmq",
	About: "AMQP 0-9-1, publisher confirms",
	Flags: func(f Flags) Settings {
		r := &rabbitmqFlags{}
		r.register(f)
		return r
	},
}

// rabbitmqFlags are the RabbitMQ sink's flags.
type rabbitmqFlags struct {
	cfg rabbitmq.Config // built by check

	url, exchange                string
	maxInFlight, maxMessageBytes int
	publishTimeout, dialTimeout  time.Duration
	tlsCA, tlsCert, tlsKey       string
	tlsInsecure                  bool
}

func (r *rabbitmqFlags) register(f Flags) {
	f.String(&r.url, "rabbitmq-url", rabbitmq.DefaultURL, "AMQP URI of the broker, amqp://user:password@host:port/vhost (amqps:// for TLS); percent-encode reserved characters; the password is never logged")
	f.String(&r.exchange, "rabbitmq-exchange", "", `exchange of the topics without "/", whose topic is the routing key; empty is the default exchange, where the routing key names the queue; a topic "exchange/routing-key" names both`)
	f.Int(&r.maxInFlight, "rabbitmq-max-in-flight", rabbitmq.DefaultMaxInFlight, "most messages one publish has sent on its channel and not yet had confirmed")
	f.Int(&r.maxMessageBytes, "rabbitmq-max-message-bytes", rabbitmq.DefaultMaxMessageBytes, "largest payload sent; a larger one fails permanently; at most the broker's max_message_size")
	f.Duration(&r.publishTimeout, "rabbitmq-publish-timeout", rabbitmq.DefaultPublishTimeout, "bound on one publish: its wait for a channel and for the broker's confirms")
	f.Duration(&r.dialTimeout, "rabbitmq-dial-timeout", rabbitmq.DefaultDialTimeout, "bound on connecting: TCP, TLS and AMQP handshakes")
	f.String(&r.tlsCA, "rabbitmq-tls-ca", "", "PEM file of the CA that signed the broker's certificate (default: system roots); needs an amqps:// URL")
	f.String(&r.tlsCert, "rabbitmq-tls-cert", "", "PEM client certificate for mutual TLS; needs an amqps:// URL")
	f.String(&r.tlsKey, "rabbitmq-tls-key", "", "PEM private key of --rabbitmq-tls-cert")
	f.Bool(&r.tlsInsecure, "rabbitmq-tls-insecure-skip-verify", false, "do not verify the broker's certificate (testing only)")
}

// check builds the rabbitmq.Config and reports every problem of the
// flags, naming each flag.
func (r *rabbitmqFlags) Check(relay.Config) error {
	var errs problems
	cfg := rabbitmq.Config{
		URL:             r.url,
		Exchange:        r.exchange,
		MaxInFlight:     r.maxInFlight,
		MaxMessageBytes: r.maxMessageBytes,
		PublishTimeout:  r.publishTimeout,
		DialTimeout:     r.dialTimeout,
	}
	for _, f := range []struct {
		name string
		ok   bool
		v    any
	}{
		{"rabbitmq-max-in-flight", r.maxInFlight > 0, r.maxInFlight},
		{"rabbitmq-max-message-bytes", r.maxMessageBytes > 0, r.maxMessageBytes},
		{"rabbitmq-publish-timeout", r.publishTimeout > 0, r.publishTimeout},
		{"rabbitmq-dial-timeout", r.dialTimeout > 0, r.dialTimeout},
	} {
		if !f.ok {
			errs.add(usage("invalid value for --%s (%s): %v is not positive", f.name, EnvName(f.name), f.v))
		}
	}
	if r.tlsCA != "" || r.tlsCert != "" || r.tlsKey != "" || r.tlsInsecure {
		tlsCfg, err := rabbitmq.LoadTLS(r.tlsCA, r.tlsCert, r.tlsKey, r.tlsInsecure)
		if err != nil {
			errs.add(usage("invalid TLS files (--rabbitmq-tls-ca, --rabbitmq-tls-cert, --rabbitmq-tls-key): %v", err))
		}
		cfg.TLS = tlsCfg
		if u, err := url.Parse(r.url); err == nil && u.Scheme != "amqps" {
			errs.add(usage("--rabbitmq-tls-ca, --rabbitmq-tls-cert, --rabbitmq-tls-key and --rabbitmq-tls-insecure-skip-verify need an amqps:// --rabbitmq-url (%s)", EnvName("rabbitmq-url")))
			cfg.TLS = nil
		}
	}
	check := cfg // without what is reported above
	check.MaxInFlight, check.MaxMessageBytes = max(check.MaxInFlight, 0), max(check.MaxMessageBytes, 0)
	check.PublishTimeout, check.DialTimeout = max(check.PublishTimeout, 0), max(check.DialTimeout, 0)
	for _, err := range rabbitmqProblems(check) {
		errs.add(rabbitmqUsage(err))
	}
	r.cfg = cfg
	return errs.err()
}

// open returns the RabbitMQ publisher and logs its configuration (the
// password redacted). It does not connect: the first publish or probe
// does.
func (r *rabbitmqFlags) Open(_ relay.Config, logger *slog.Logger, _ io.Writer) (publishers.Publisher, error) {
	cfg := r.cfg
	cfg.Logger = logger
	p, err := rabbitmq.New(cfg)
	if err != nil {
		return nil, rabbitmqUsage(err)
	}
	logger.Info("rabbitmq sink", "config", p.Config())
	return p, nil
}

// rabbitmqProblems returns every error rabbitmq.New finds in cfg, not
// only the first: each refused field is set back to its default and cfg
// is checked again. New does not connect.
func rabbitmqProblems(cfg rabbitmq.Config) []error {
	var out []error
	seen := map[string]bool{}
	for {
		p, err := rabbitmq.New(cfg)
		if err == nil {
			_ = p.Close()
			return out
		}
		var ce *rabbitmq.ConfigError
		if !errors.As(err, &ce) || seen[ce.Field] {
			return append(out, err)
		}
		out, seen[ce.Field] = append(out, err), true
		if ce.Field == "URL" {
			cfg.URL, cfg.TLS = "", nil
		} else if !zeroField(&cfg, ce.Field) {
			return out
		}
	}
}

// rabbitmqConfigFlag maps rabbitmq.Config fields to the flags that set
// them.
var rabbitmqConfigFlag = map[string]string{
	"URL": "rabbitmq-url", "Exchange": "rabbitmq-exchange", "TLS": "rabbitmq-url",
	"MaxInFlight": "rabbitmq-max-in-flight", "MaxMessageBytes": "rabbitmq-max-message-bytes",
	"PublishTimeout": "rabbitmq-publish-timeout", "DialTimeout": "rabbitmq-dial-timeout",
}

// rabbitmqUsage turns an error of rabbitmq.New into a usage error naming
// the flag. The error holds no password.
func rabbitmqUsage(err error) error {
	var ce *rabbitmq.ConfigError
	if errors.As(err, &ce) && rabbitmqConfigFlag[ce.Field] != "" {
		name := rabbitmqConfigFlag[ce.Field]
		return invalid(name, ce.Reason)
	}
	return usage("invalid RabbitMQ configuration: %v", err)
}

// rabbitmqReader declares a queue where the sink routes the topic
// (rabbitmq.ParseDestination) and consumes it. The queue is exclusive: the
// broker deletes it when the reader disconnects, even after a crash.
type rabbitmqReader struct {
	f               *rabbitmqFlags
	conn            *amqp.Connection
	ch              *amqp.Channel
	createdExchange string
	wg              sync.WaitGroup
}

// Reader returns a Reader of the broker of --rabbitmq-url, for the
// routing of --rabbitmq-exchange.
func (r *rabbitmqFlags) Reader(string) (Reader, error) { return &rabbitmqReader{f: r}, nil }

// Open declares the destination the sink maps topic to: on the default
// exchange, the queue the routing key names; on another exchange (which
// it declares, as a topic exchange, when it is missing, and deletes at
// Close), a queue of the broker's naming bound with the routing key. It
// then consumes the queue.
func (r *rabbitmqReader) Open(ctx context.Context, topic string, got func(Record)) (string, error) {
	dest, err := rabbitmq.ParseDestination(topic, r.f.exchange)
	if err != nil {
		return "", err
	}
	conn, err := amqp.Dial(r.f.url)
	if err != nil {
		return "", fmt.Errorf("cannot reach RabbitMQ (start rabbitmq-server, or pass --rabbitmq-url): %w", err)
	}
	r.conn = conn
	if dest.Exchange != "" {
		if err := r.ensureExchange(dest.Exchange); err != nil {
			return "", err
		}
	}
	if r.ch, err = conn.Channel(); err != nil {
		return "", fmt.Errorf("rabbitmq: channel: %w", err)
	}
	queue := ""
	if dest.Exchange == "" {
		queue = dest.RoutingKey
	}
	q, err := r.ch.QueueDeclare(queue, false, true, true, false, nil) // not durable, auto-delete, exclusive
	if err != nil {
		return "", fmt.Errorf("rabbitmq: declare queue %q: %w", queue, err)
	}
	where := fmt.Sprintf("queue %s on the default exchange", q.Name)
	if dest.Exchange != "" {
		if err := r.ch.QueueBind(q.Name, dest.RoutingKey, dest.Exchange, false, nil); err != nil {
			return "", fmt.Errorf("rabbitmq: bind queue %s to exchange %s with routing key %s: %w", q.Name, dest.Exchange, dest.RoutingKey, err)
		}
		where = fmt.Sprintf("queue %s bound to exchange %s with routing key %s", q.Name, dest.Exchange, dest.RoutingKey)
	}
	// Consume, not ConsumeWithContext: amqp091-go v1.16 cancels a
	// consumer whose context ended from a goroutine of its own, and a
	// channel or connection closed meanwhile then waits forever (Close hung
	// the demo for 10 minutes in CI). The consumer ends with the connection.
	deliveries, err := r.ch.Consume(q.Name, "outboxrelay-demo", true, true, false, false, nil) // auto-ack, exclusive
	if err != nil {
		return "", fmt.Errorf("rabbitmq: consume queue %s: %w", q.Name, err)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for d := range deliveries { // ends when the channel closes
			id, _ := d.Headers[outbox.HeaderEventID].(string)
			key, _ := d.Headers[rabbitmq.HeaderKey].(string)
			got(Record{EventID: id, Key: key, Payload: string(d.Body)})
		}
	}()
	return fmt.Sprintf("rabbitmq: %s, topic %s to %s", conn.RemoteAddr(), topic, where), nil
}

// ensureExchange declares exchange as a topic exchange unless it exists.
// A passive declare of a missing exchange closes its channel: it gets one
// of its own.
func (r *rabbitmqReader) ensureExchange(exchange string) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: channel: %w", err)
	}
	err = ch.ExchangeDeclarePassive(exchange, amqp.ExchangeTopic, false, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return ch.Close()
	case !errors.As(err, &ae) || ae.Code != amqp.NotFound:
		return fmt.Errorf("rabbitmq: exchange %s: %w", exchange, err)
	}
	if ch, err = r.conn.Channel(); err != nil {
		return fmt.Errorf("rabbitmq: channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declare exchange %s: %w", exchange, err)
	}
	r.createdExchange = exchange
	return nil
}

// closeTimeout bounds closing the connection.
const closeTimeout = 2 * time.Second

// Close stops consuming, deletes the exchange Open declared, and
// disconnects, which deletes the queue.
func (r *rabbitmqReader) Close() error {
	if r.conn == nil {
		return nil
	}
	var err error
	if r.createdExchange != "" {
		if ch, cerr := r.conn.Channel(); cerr == nil {
			err = ch.ExchangeDelete(r.createdExchange, false, false)
			_ = ch.Close()
		}
	}
	// Closing the connection closes the channel and ends the consumer;
	// the deadline bounds the close handshake with a broker that does
	// not answer.
	err = errors.Join(err, r.conn.CloseDeadline(time.Now().Add(closeTimeout)))
	r.wg.Wait()
	return err
}

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
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
	"github.com/outboxrelay/outboxrelay/relay"
)

// rabbitmqSink publishes to RabbitMQ (publishers/rabbitmq); its flags are
// --rabbitmq-*.
func init() { register(rabbitmqSink) }

var rabbitmqSink = Sink{
	Name:        "rabbitmq",
	CloudEvents: cloudevents.AMQP,
	About:       "AMQP 0-9-1, publisher confirms",
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
		} else if !ZeroField(&cfg, ce.Field) {
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

// rabbitmqReader reads, for each topic, a durable queue where the sink
// routes it: on the default exchange the queue the routing key names; on
// another exchange (declared as a topic exchange when it is missing, and
// deleted with the queue) a queue named after the topic, bound with the
// routing key. It connects at its first Prepare.
type rabbitmqReader struct {
	f       *rabbitmqFlags
	conn    *amqp.Connection
	created map[string]string // topic -> the exchange Prepare declared

	mu   sync.Mutex       // Reads of several topics run at once
	read map[string]int64 // topic -> the messages read: the next one's Offset
}

// Reader returns a Reader of the broker of --rabbitmq-url, for the
// routing of --rabbitmq-exchange.
func (r *rabbitmqFlags) Reader() (Reader, error) {
	return &rabbitmqReader{f: r, created: map[string]string{}, read: map[string]int64{}}, nil
}

// queue returns the queue that receives topic, and where the sink sends it.
func (r *rabbitmqReader) queue(topic string) (string, rabbitmq.Destination, error) {
	dest, err := rabbitmq.ParseDestination(topic, r.f.exchange)
	if dest.Exchange == "" {
		return dest.RoutingKey, dest, err
	}
	return topic, dest, err
}

// withChannel runs fn on a channel of its own, closed after.
func (r *rabbitmqReader) withChannel(fn func(*amqp.Channel) error) error {
	ch, err := r.conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitmq: channel: %w", err)
	}
	defer ch.Close()
	return fn(ch)
}

func (r *rabbitmqReader) Prepare(_ context.Context, topic string) (string, error) {
	q, dest, err := r.queue(topic)
	if err != nil {
		return "", err
	}
	if r.conn == nil {
		if r.conn, err = amqp.DialConfig(r.f.url, amqp.Config{Properties: amqp.Table{"connection_name": "outboxrelay-reader"}}); err != nil {
			return "", fmt.Errorf("cannot reach RabbitMQ (start rabbitmq-server, or pass --rabbitmq-url): %w", err)
		}
	}
	if dest.Exchange != "" {
		if err := r.ensureExchange(topic, dest.Exchange); err != nil {
			return "", err
		}
	}
	where := fmt.Sprintf("queue %s on the default exchange", q)
	err = r.withChannel(func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			return fmt.Errorf("rabbitmq: declare queue %s: %w", q, err)
		}
		if dest.Exchange == "" {
			return nil
		}
		where = fmt.Sprintf("queue %s bound to exchange %s with routing key %s", q, dest.Exchange, dest.RoutingKey)
		if err := ch.QueueBind(q, dest.RoutingKey, dest.Exchange, false, nil); err != nil {
			return fmt.Errorf("rabbitmq: bind queue %s to exchange %s with routing key %s: %w", q, dest.Exchange, dest.RoutingKey, err)
		}
		return nil
	})
	return fmt.Sprintf("rabbitmq: %s, topic %s to %s", r.conn.RemoteAddr(), topic, where), err
}

// ensureExchange declares exchange as a topic exchange unless it exists.
// A passive declare of a missing exchange closes its channel: it gets one
// of its own.
func (r *rabbitmqReader) ensureExchange(topic, exchange string) error {
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
	r.created[topic] = exchange
	return nil
}

// rabbitmqReadIdle bounds a read to the end that makes no progress.
const rabbitmqReadIdle = 10 * time.Second

func (r *rabbitmqReader) Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error {
	q, _, err := r.queue(topic)
	if err != nil {
		return err
	}
	return r.withChannel(func(ch *amqp.Channel) error {
		want := 0
		if !follow {
			info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			if err != nil {
				return fmt.Errorf("rabbitmq: queue %s: %w", q, err)
			}
			if want = info.Messages; want == 0 {
				return nil
			}
		}
		if err := ch.Qos(1000, 0, false); err != nil {
			return fmt.Errorf("rabbitmq: qos: %w", err)
		}
		// Consume, not ConsumeWithContext: amqp091-go v1.16 cancels a
		// consumer whose context ended from a goroutine of its own, and a
		// channel closed meanwhile then waits forever. The consumer is
		// cancelled here, before withChannel closes the channel, and what
		// it still receives is handed over: auto-acked, it has left the
		// queue.
		const tag = "outboxrelay-reader"
		deliveries, err := ch.Consume(q, tag, true, false, false, false, nil) // auto-ack
		if err != nil {
			return fmt.Errorf("rabbitmq: consume %s: %w", q, err)
		}
		hand := func(d amqp.Delivery) {
			id, _ := d.Headers[outbox.HeaderEventID].(string)
			key, _ := d.Headers[rabbitmq.HeaderKey].(string)
			r.mu.Lock()
			offset := r.read[topic]
			r.read[topic]++
			r.mu.Unlock()
			got(Record{EventID: id, Key: key, Payload: string(d.Body), Offset: offset, Time: time.Now()})
		}
		defer func() {
			if err := ch.Cancel(tag, false); err != nil {
				go func() {
					for range deliveries { //nolint:revive // the channel is closing: draining until it has
					}
				}()
				return
			}
			for d := range deliveries {
				hand(d)
			}
		}()
		if ready != nil {
			ready()
		}
		idle := time.NewTimer(rabbitmqReadIdle)
		defer idle.Stop()
		for n := 0; follow || n < want; n++ {
			select {
			case d, ok := <-deliveries:
				if !ok {
					if follow && ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("rabbitmq: consumer of %s closed after %d messages", q, n)
				}
				hand(d)
				idle.Reset(rabbitmqReadIdle)
			case <-idle.C:
				if !follow {
					return fmt.Errorf("rabbitmq: read %d of the %d messages of %s, then nothing for %v", n, want, q, rabbitmqReadIdle)
				}
				n--
			case <-ctx.Done():
				if follow {
					return nil
				}
				return ctx.Err()
			}
		}
		return nil
	})
}

// Remove deletes topic's queue, and the exchange Prepare declared for it.
func (r *rabbitmqReader) Remove(_ context.Context, topic string) error {
	q, _, err := r.queue(topic)
	if err != nil {
		return err
	}
	return r.withChannel(func(ch *amqp.Channel) error {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("rabbitmq: delete queue %s: %w", q, err)
		}
		if x := r.created[topic]; x != "" {
			delete(r.created, topic)
			if err := ch.ExchangeDelete(x, false, false); err != nil {
				return fmt.Errorf("rabbitmq: delete exchange %s: %w", x, err)
			}
		}
		return nil
	})
}

// Close disconnects; the deadline bounds the close handshake with a broker
// that does not answer.
func (r *rabbitmqReader) Close() error {
	if r.conn == nil {
		return nil
	}
	return r.conn.CloseDeadline(time.Now().Add(2 * time.Second))
}

package bench

import (
	"context"
	"fmt"
	"net/url"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// The sinks Run can measure: Config.Sink.
const (
	SinkKafka    = "kafka"
	SinkNATS     = "nats"
	SinkRabbitMQ = "rabbitmq"
	SinkRedis    = "redis"
	SinkWebhook  = "webhook"
)

// Sinks lists every sink, in the order the usage text gives them.
var Sinks = []string{SinkKafka, SinkNATS, SinkRabbitMQ, SinkRedis, SinkWebhook}

// Default URLs of the sinks' servers (Config.SinkURL): the local ones, as
// the sinks' own defaults.
const (
	DefaultNATSURL     = "nats://127.0.0.1:4222"
	DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// sink is where one Run's relays publish: it makes each run's destination,
// says how the relays reach it, and reads the events back. A topic names
// a run's destination as the outbox topic the events are written with.
type sink interface {
	// relayArgs are the relays' --sink flag and the flags of that sink;
	// relayEnv is more of their environment (URLs that may hold a
	// password, kept off the command line).
	relayArgs() []string
	relayEnv() []string
	// prepare makes topic's destination (a topic, stream or queue),
	// empty; cleanup removes it.
	prepare(ctx context.Context, topic string) error
	cleanup(ctx context.Context, topic string) error
	// read records into a each event that reached topic's destination,
	// with its arrival time. With follow it reads until ctx ends (and
	// returns nil then); without, it stops once it read what the
	// destination held when it began. ready, when not nil, is called once
	// the consumer is in place.
	read(ctx context.Context, topic string, follow bool, a *arrivals, ready func()) error
	// settings are the sink's entries of Settings.
	settings(s *Settings)
	// close releases the sink's connections and servers.
	close() error
}

// ceilingSink is a sink whose client can publish without the relay: the
// sink ceiling (see runSinkCeiling).
type ceilingSink interface {
	sink
	// publish publishes msgs to topic's destination with the client the
	// sink package uses, as the sink does (the same headers, the same
	// acknowledgement), and returns once every one was acknowledged. It
	// is safe for concurrent use.
	publish(ctx context.Context, topic string, msgs []outbox.Message) error
}

// openSink connects to cfg.Sink's server (or starts what it needs).
func openSink(ctx context.Context, cfg Config) (sink, error) {
	switch cfg.Sink {
	case SinkNATS:
		return openNATS(ctx, cfg.SinkURL)
	case SinkRabbitMQ:
		return openRabbitMQ(ctx, cfg.SinkURL)
	case SinkRedis:
		return openRedis(ctx, cfg.SinkURL)
	case SinkWebhook:
		return openWebhook()
	}
	return nil, fmt.Errorf("bench: no sink %q", cfg.Sink) // validate refuses it first
}

// redactURL is u with its password hidden, for Settings.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

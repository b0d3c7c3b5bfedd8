package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
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

// Sinks lists every sink Run can measure, by name: each sink of the
// registry (internal/sinks) that can be read back.
var Sinks = func() []string {
	var names []string
	for _, s := range sinks.All() {
		if st, _, _ := s.Parse(); st != nil {
			if _, ok := st.(sinks.Readable); ok {
				names = append(names, s.Name)
			}
		}
	}
	return names
}()

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

// registrySink is a sink of the registry (internal/sinks) but Kafka: its
// flags point at Config.SinkURL (--<sink>-url), or at what its reader
// started (a webhook receiver), and reach the relays in their environment
// (a URL may hold a password); its reader prepares, reads back and removes
// each run's destination.
type registrySink struct {
	name, url string
	env       []string
	reader    sinks.Reader
	ceiling   ceiling // nil: the sink has none
}

// ceiling publishes with the client the sink package uses, as the sink
// does (the same headers, the same acknowledgement), for the sink ceiling
// (see runSinkCeiling).
type ceiling interface {
	// publish publishes msgs to topic's destination and returns once
	// every one was acknowledged. It is safe for concurrent use.
	publish(ctx context.Context, topic string, msgs []outbox.Message) error
	close() error
}

// ceilings open the ceiling client of each sink that has one, for the URL
// its flags settled on.
var ceilings = map[string]func(ctx context.Context, url string) (ceiling, error){
	SinkNATS: openNATSCeiling, SinkRabbitMQ: openRabbitMQCeiling, SinkRedis: openRedisCeiling, SinkWebhook: openWebhookCeiling,
}

// openSink connects to cfg.Sink's server (or starts what it needs).
func openSink(ctx context.Context, cfg Config) (sink, error) {
	sk, ok := sinks.Named(cfg.Sink)
	if !ok {
		return nil, fmt.Errorf("bench: no sink %q", cfg.Sink) // validate refuses it first
	}
	var args []string
	if cfg.SinkURL != "" {
		args = []string{"--" + cfg.Sink + "-url", cfg.SinkURL}
	}
	settings, fs, err := sk.Parse(args...)
	if err != nil {
		return nil, fmt.Errorf("bench: %s sink: %w", cfg.Sink, err)
	}
	readable, ok := settings.(sinks.Readable)
	if !ok {
		return nil, fmt.Errorf("bench: the %s sink cannot be read back", cfg.Sink)
	}
	s := &registrySink{name: cfg.Sink}
	if s.reader, err = readable.Reader(""); err != nil {
		return nil, err
	}
	s.env = sinks.Changed(fs)
	if fl := fs.Lookup(cfg.Sink + "-url"); fl != nil {
		s.url = fl.Value.String()
	}
	if open := ceilings[cfg.Sink]; open != nil {
		if s.ceiling, err = open(ctx, s.url); err != nil {
			_ = s.reader.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *registrySink) relayArgs() []string { return []string{"--sink", s.name} }
func (s *registrySink) relayEnv() []string  { return s.env }

func (s *registrySink) prepare(ctx context.Context, topic string) error {
	_, err := s.reader.Prepare(ctx, topic)
	return err
}

func (s *registrySink) cleanup(ctx context.Context, topic string) error {
	return s.reader.Remove(ctx, topic)
}

func (s *registrySink) read(ctx context.Context, topic string, follow bool, a *arrivals, ready func()) error {
	return s.reader.Read(ctx, topic, follow, func(r sinks.Record) {
		id, _ := uuid.Parse(r.EventID)
		a.add([]uuid.UUID{id}, time.Now())
	}, ready)
}

func (s *registrySink) settings(st *Settings) { st.Sink, st.SinkURL = s.name, redactURL(s.url) }

func (s *registrySink) close() error {
	err := s.reader.Close()
	if s.ceiling != nil {
		err = errors.Join(err, s.ceiling.close())
	}
	return err
}

// redactURL is u with its password hidden, for Settings.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	if _, set := p.User.Password(); !set {
		return u
	}
	return p.Redacted()
}

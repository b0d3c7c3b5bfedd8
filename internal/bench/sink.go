package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
)

// Sinks lists every sink Run can measure, by name: each sink of the
// registry (internal/sinks) that can be read back.
var Sinks = sinks.Readables()

// sink is where one Run's relays publish: a sink of the registry. Its
// flags point at Config.SinkURL or Brokers, or at what its reader started
// (a webhook receiver), or at a broker embedded in a process of its own
// (Kafka without brokers); they reach the relays in their environment (a
// URL may hold a password). Its reader makes each run's destination (a
// topic names it, as the outbox topic the events are written with), reads
// the events back and removes it.
type sink struct {
	name     string
	settings sinks.Settings
	fs       *flag.FlagSet // the settings' flags
	reader   sinks.Reader
	broker   *brokerProc // the embedded broker's process; nil without one
}

// openSink reads cfg.Sink's flags and opens its reader, starting the
// sink's embedded broker in a process of its own when the sink has one and
// cfg names no server.
func openSink(ctx context.Context, cfg Config) (*sink, error) {
	sk, _ := sinks.Named(cfg.Sink) // validate checked it
	args, err := cfg.sinkArgs()
	if err != nil {
		return nil, err
	}
	s := &sink{name: cfg.Sink}
	if s.settings, s.fs, err = sk.Parse(args...); err != nil {
		return nil, fmt.Errorf("bench: %s sink: %w", cfg.Sink, err)
	}
	if _, ok := s.settings.(sinks.Embedder); ok && len(args) == 0 {
		if s.broker, err = startBroker(ctx, cfg.BrokerBinary, cfg.Sink); err != nil {
			return nil, err
		}
		fmt.Fprintf(cfg.Progress, "%s: embedded broker in its own process: %s\n", cfg.Sink, strings.Join(s.broker.args, " "))
		sinks.EmulatorEnv() // an embedded broker is an emulator: placeholder AWS credentials, for this process and its relays
		if s.settings, s.fs, err = sk.Parse(s.broker.args...); err != nil {
			_ = s.close()
			return nil, fmt.Errorf("bench: %s sink: %w", cfg.Sink, err)
		}
	}
	if s.reader, err = s.settings.(sinks.Readable).Reader(); err != nil {
		_ = s.close()
		return nil, err
	}
	return s, nil
}

// relayEnv is the sink's part of the relays' environment.
func (s *sink) relayEnv() []string { return sinks.Changed(s.fs) }

// prepare makes topic's destination (a topic, stream or queue), empty;
// cleanup removes it.
func (s *sink) prepare(ctx context.Context, topic string) error {
	_, err := s.reader.Prepare(ctx, topic)
	return err
}

func (s *sink) cleanup(ctx context.Context, topic string) error {
	return s.reader.Remove(ctx, topic)
}

// read records into a each event that reached topic's destination, with
// its arrival time. With follow it reads until ctx ends (and returns nil
// then); without, it stops once it read what the destination held when it
// began. ready, when not nil, is called once the consumer is in place.
func (s *sink) read(ctx context.Context, topic string, follow bool, a *arrivals, ready func()) error {
	return s.reader.Read(ctx, topic, follow, func(r sinks.Record) {
		id, _ := uuid.Parse(r.EventID)
		a.add([]uuid.UUID{id}, time.Now())
	}, ready)
}

// reportSettings fills the sink's entries of Settings: its name, its
// --<sink>-url (password hidden) and --kafka-brokers, where it has them.
func (s *sink) reportSettings(st *Settings) {
	st.Sink, st.EmbeddedBroker = s.name, s.broker != nil
	if f := serverFlag(s.fs, s.name); f != nil {
		st.SinkURL = redactURL(f.Value.String())
	}
	if f := s.fs.Lookup("kafka-brokers"); f != nil {
		st.Brokers = strings.Split(f.Value.String(), ",")
	}
}

// serverFlag is the flag that names the sink's server: --<sink>-url, or
// --<sink>-endpoint (pubsub's host:port); nil when it has neither.
func serverFlag(fs *flag.FlagSet, sink string) *flag.Flag {
	if f := fs.Lookup(sink + "-url"); f != nil {
		return f
	}
	return fs.Lookup(sink + "-endpoint")
}

// close releases the reader and stops the embedded broker.
func (s *sink) close() error {
	var err error
	if s.reader != nil {
		err = s.reader.Close()
	}
	if s.broker != nil {
		err = errors.Join(err, s.broker.stop())
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

// Package sinks is the registry of the sinks: each file here describes one
// sink (a package under publishers/) to everything that uses it. relay run
// (cmd/relay) takes its --sink names, flags and publishers from it; relay
// demo (internal/demo), relay-bench (internal/bench) and the fault harness
// (integration/chaos) the Reader that reads a sink's events back, built
// from the same flags.
//
// A sink's file declares a Sink value and registers it with one line:
//
//	func init() { register(xSink) }
package sinks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Sink describes one sink.
type Sink struct {
	// Name is the value of --sink that selects it.
	Name string
	// About describes it in --sink's help, after its name ("JSON lines,
	// for debugging"); "" for none.
	About string
	// CloudEvents is how the sink carries CloudEvents (relay run's
	// --cloudevents); the zero Binding carries none.
	CloudEvents cloudevents.Binding
	// Flags registers the sink's flags on f, all named after the sink
	// (--kafka-brokers), and returns the settings they fill.
	Flags func(f Flags) Settings
}

// Settings are one sink's flags, once parsed.
type Settings interface {
	// Check returns every problem of the settings, joined (errors.Join),
	// each naming its flag and variable; rc is the relay's configuration,
	// for the settings that depend on it. It neither logs nor connects.
	Check(rc relay.Config) error
	// Open returns the sink's publisher; Check has passed. It logs the
	// sink's configuration, without secrets, and may not connect yet.
	Open(rc relay.Config, logger *slog.Logger, stdout io.Writer) (publishers.Publisher, error)
}

// Readable is implemented by the Settings of a sink whose events can be
// read back (every sink but stdout).
type Readable interface {
	// Reader returns a Reader of the broker the settings point at. It is
	// called before Check, and may start a broker of its own (an embedded
	// Kafka broker when no --kafka-brokers is given, a webhook receiver)
	// and point the settings at it; Reader.Close stops it.
	Reader() (Reader, error)
}

// Embedder is implemented by the Settings of a sink whose broker can run
// embedded, on 127.0.0.1, where any process of the host reaches it (Kafka:
// a kfake broker). Embed starts one and points the settings at it; stop
// stops it. Reader calls it when the settings name no broker; relay-bench
// calls it in a process of its own, to measure the broker's CPU apart.
type Embedder interface {
	Embed() (stop func(), err error)
}

// Reader reads back, with the broker's own client, what a sink published.
// Every Reader reads one key's messages in the order the broker keeps
// them.
type Reader interface {
	// Prepare creates the destination of topic, empty (a Kafka topic, a
	// JetStream stream capturing the subject, a queue where the RabbitMQ
	// sink routes it, a stream, a receiver's path), and returns a line
	// that describes it.
	Prepare(ctx context.Context, topic string) (string, error)
	// Read hands got each message of topic's destination from its
	// beginning, from one goroutine at a time. With follow it reads until
	// ctx ends (and returns nil then); without, it returns once it read
	// what the destination held when it began. ready, when not nil, is
	// called once the reader is in place.
	Read(ctx context.Context, topic string, follow bool, got func(Record), ready func()) error
	// Remove deletes topic's destination (a Kafka topic only if Prepare
	// created it).
	Remove(ctx context.Context, topic string) error
	// Close releases the connections and what Reader started (an
	// embedded broker, a receiver).
	Close() error
}

// Record is one message as a Reader read it back.
type Record struct {
	// EventID is the outbox event id the message carries (the
	// outbox-event-id header or its equivalent); "" when it carries none.
	EventID string
	// Key is the outbox key, its bytes as a string.
	Key string
	// Payload is the message's body.
	Payload string
	// Partition and Offset place the message in its destination: a key's
	// messages in the order the destination keeps them, each message at
	// the same place in every Read of one Reader. Partition is 0 but on
	// Kafka.
	Partition int
	Offset    int64
	// Time is when the broker stored the message (Kafka: when the producer
	// built it), or, for a broker that keeps no time, when the reader
	// received it.
	Time time.Time
}

// Flags is where a sink registers its flags: cmd/relay's flag set, in
// which each flag also reads the variable EnvName names.
type Flags interface {
	String(p *string, name, def, usage string)
	Int(p *int, name string, def int, usage string)
	Bool(p *bool, name string, def bool, usage string)
	Duration(p *time.Duration, name string, def time.Duration, usage string)
	// Func registers a flag of the given kind ("header") parsed by set
	// and shown by get.
	Func(name, kind, usage string, set func(string) error, get func() string)
}

// all are the registered sinks, in the order of their names.
var all []Sink

// register adds s to the registry; sink files call it from init.
func register(s Sink) {
	if _, dup := Named(s.Name); dup {
		panic("sinks: " + s.Name + " registered twice")
	}
	all = append(all, s)
	slices.SortFunc(all, func(a, b Sink) int { return strings.Compare(a.Name, b.Name) })
}

// All returns every registered sink, in the order of their names.
func All() []Sink { return slices.Clone(all) }

// Readables returns the names of the registered sinks whose events can be
// read back (their Settings are Readable), in order: those relay demo,
// relay-bench and the fault harness take.
func Readables() []string {
	var names []string
	for _, s := range all {
		st, _, _ := s.Parse()
		if _, ok := st.(Readable); ok {
			names = append(names, s.Name)
		}
	}
	return names
}

// Named returns the registered sink called name.
func Named(name string) (Sink, bool) {
	i := slices.IndexFunc(all, func(s Sink) bool { return s.Name == name })
	if i < 0 {
		return Sink{}, false
	}
	return all[i], true
}

// Parse returns the settings of s from args, its flags as relay run takes
// them (without their variables), and the flag set that holds them: how a
// harness points a sink at a broker of its own, then (Changed) its relays.
func (s Sink) Parse(args ...string) (Settings, *flag.FlagSet, error) {
	fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	st := s.Flags(flagSet{fs})
	return st, fs, fs.Parse(args)
}

// Changed returns the flags of fs whose value is not their default, as
// environment variables (OUTBOX_NATS_URL=...): what points a relay at the
// broker Parse and Reader (which may start one) settled on.
func Changed(fs *flag.FlagSet) []string {
	return changed(fs, func(name string) string { return EnvName(name) + "=" })
}

// Args returns the flags of fs whose value is not their default as
// arguments for Parse (--kafka-brokers=...).
func Args(fs *flag.FlagSet) []string {
	return changed(fs, func(name string) string { return "--" + name + "=" })
}

func changed(fs *flag.FlagSet, prefix func(name string) string) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if v := f.Value.String(); v != f.DefValue {
			out = append(out, prefix(f.Name)+v)
		}
	})
	return out
}

// flagSet is Flags on a flag.FlagSet.
type flagSet struct{ fs *flag.FlagSet }

func (f flagSet) String(p *string, name, def, usage string)      { f.fs.StringVar(p, name, def, usage) }
func (f flagSet) Int(p *int, name string, def int, usage string) { f.fs.IntVar(p, name, def, usage) }
func (f flagSet) Bool(p *bool, name string, def bool, usage string) {
	f.fs.BoolVar(p, name, def, usage)
}
func (f flagSet) Duration(p *time.Duration, name string, def time.Duration, usage string) {
	f.fs.DurationVar(p, name, def, usage)
}
func (f flagSet) Func(name, _, usage string, set func(string) error, _ func() string) {
	f.fs.Func(name, usage, set)
}

// UniqueTopic returns base with a suffix unique to the run (".r" and 8 hex
// digits), a valid Kafka topic, NATS subject, RabbitMQ routing key, Redis
// stream key and URL path segment: a broker that keeps what earlier runs
// published then gives each run a destination of its own.
func UniqueTopic(base string) string { return fmt.Sprintf("%s.r%08x", base, rand.Uint32()) }

// EnvName returns the environment variable of a flag: OUTBOX_KAFKA_BROKERS
// for kafka-brokers.
func EnvName(flagName string) string {
	return "OUTBOX_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// problems collects the errors of Check, joined by err.
type problems []error

func (p *problems) add(err error) {
	if err != nil {
		*p = append(*p, joined(err)...)
	}
}

func (p problems) err() error { return errors.Join(p...) }

// usage is a problem of a flag's value.
func usage(format string, args ...any) error { return fmt.Errorf(format, args...) }

// invalid is the problem of one flag: "invalid value for --name (VAR): reason".
func invalid(name, reason string) error {
	return usage("invalid value for --%s (%s): %s", name, EnvName(name), reason)
}

// joined returns the errors err joins (errors.Join), or err alone.
func joined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// ZeroField sets the field at path ("Brokers", "SASL.Mechanism") of the
// struct p points to to its zero value, and reports whether there was one:
// how a check reports every invalid field of a configuration, not only
// the first (cmd/relay's relay.Config too).
func ZeroField(p any, path string) bool {
	v := reflect.ValueOf(p).Elem()
	for name := range strings.SplitSeq(path, ".") {
		if v.Kind() != reflect.Struct {
			return false
		}
		if v = v.FieldByName(name); !v.IsValid() {
			return false
		}
	}
	if !v.CanSet() {
		return false
	}
	v.SetZero()
	return true
}

package main

import (
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// sinks are the sinks relay run can publish to, in the order of their
// names; --sink picks one by name, defaultSink when it is not set. A sink
// is a package under publishers/ (which passes publishers/publisherstest)
// and a file here, sink_<name>.go, that declares its flags and registers
// it with one line: func init() { registerSink(xSink) }.
var sinks []sink

// defaultSink is the sink --sink defaults to.
const defaultSink = "kafka"

// registerSink adds s to sinks; sink files call it from init.
func registerSink(s sink) {
	if _, dup := sinkNamed(s.name); dup {
		panic("relay: sink " + s.name + " registered twice")
	}
	sinks = append(sinks, s)
	slices.SortFunc(sinks, func(a, b sink) int { return strings.Compare(a.name, b.name) })
}

// sink is what relay run knows of one sink.
type sink struct {
	// name is the value of --sink that selects it.
	name string
	// about describes it in --sink's help, after its name ("JSON lines,
	// for debugging"); "" for none.
	about string
	// flags registers the sink's flags on f, all named after the sink
	// (--kafka-brokers), and returns the settings they fill. Every sink's
	// flags are registered, whichever --sink picks.
	flags func(f *flags) sinkSettings
}

// sinkSettings are one sink's flags, once parsed.
type sinkSettings interface {
	// check returns every problem of the settings, each a usage error
	// naming its flag and variable; rc is the relay's configuration, for
	// the settings that depend on it. It neither logs nor connects.
	check(rc relay.Config) error
	// open returns the sink's publisher; check has passed. It logs the
	// sink's configuration, without secrets, and may not connect yet.
	open(rc relay.Config, logger *slog.Logger, stdout io.Writer) (publishers.Publisher, error)
}

// sinkNamed returns the registered sink called name.
func sinkNamed(name string) (sink, bool) {
	for _, s := range sinks {
		if s.name == name {
			return s, true
		}
	}
	return sink{}, false
}

// sinkHelp is --sink's help: "where events go: kafka, or stdout (...)".
func sinkHelp() string {
	names := make([]string, len(sinks))
	for i, s := range sinks {
		names[i] = s.name
		if s.about != "" {
			names[i] += " (" + s.about + ")"
		}
	}
	return "where events go: " + orList(names, ", or ")
}

// sinkNames lists the sinks for an error message: "kafka or stdout".
func sinkNames() string {
	names := make([]string, len(sinks))
	for i, s := range sinks {
		names[i] = s.name
	}
	return orList(names, " or ")
}

// orList joins items with ", " and the last one with last.
func orList(items []string, last string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + last + items[len(items)-1]
}

// sinkFlagSet holds every registered sink's settings.
type sinkFlagSet map[string]sinkSettings

func (s *sinkFlagSet) register(f *flags) {
	*s = make(sinkFlagSet, len(sinks))
	for _, sk := range sinks {
		(*s)[sk.name] = sk.flags(f)
	}
}

// warnInsecureTLS logs a warning for each sink in use whose
// --<sink>-tls-insecure-skip-verify is on.
func (o *runOptions) warnInsecureTLS(logger *slog.Logger) {
	used := []string{o.sink}
	if len(o.rules) > 0 {
		used = sinksOf(o.rules)
	}
	for _, name := range used {
		if fl := o.f.fs.Lookup(name + "-tls-insecure-skip-verify"); fl != nil && fl.Value.String() == "true" {
			logger.Warn("TLS certificate verification is off: whoever is between the relay and the "+name+" sink can read and change what it sends", "flag", "--"+fl.Name)
		}
	}
}

package main

import (
	"io"
	"log/slog"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// The sinks relay run can publish to are those of the registry,
// internal/sinks: --sink picks one by name, defaultSink when it is not
// set.

// defaultSink is the sink --sink defaults to.
const defaultSink = "kafka"

// sinkHelp is --sink's help: "where events go: kafka, or stdout (...)".
func sinkHelp() string {
	var names []string
	for _, s := range sinks.All() {
		names = append(names, s.Name)
		if s.About != "" {
			names[len(names)-1] += " (" + s.About + ")"
		}
	}
	return "where events go: " + orList(names, ", or ")
}

// sinkNames lists the sinks for an error message: "kafka or stdout".
func sinkNames() string {
	var names []string
	for _, s := range sinks.All() {
		names = append(names, s.Name)
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

// sinkFlagSet holds every registered sink's settings, by name: every
// sink's flags are registered, whichever --sink picks.
type sinkFlagSet map[string]sinks.Settings

func (s *sinkFlagSet) register(f *flags) {
	*s = sinkFlagSet{}
	for _, sk := range sinks.All() {
		(*s)[sk.Name] = sk.Flags(f)
	}
}

// check returns every problem of the named sink's flags as a usage error.
func (s sinkFlagSet) check(name string, rc relay.Config) error {
	var errs problems
	errs.add(s[name].Check(rc))
	return errs.err()
}

// open returns the named sink's publisher; its errors are usage errors.
func (s sinkFlagSet) open(name string, rc relay.Config, logger *slog.Logger, stdout io.Writer) (publishers.Publisher, error) {
	p, err := s[name].Open(rc, logger, stdout)
	if err != nil {
		var errs problems
		errs.add(err)
		return nil, errs.err()
	}
	return p, nil
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

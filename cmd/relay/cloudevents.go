package main

import (
	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	"github.com/outboxrelay/outboxrelay/publishers/route"
)

// ceFlags are --cloudevents and --cloudevents-source: events sent as
// CloudEvents 1.0 (publishers/cloudevents), on every sink, or per route
// with +cloudevents=MODE after a rule's sink.
type ceFlags struct {
	mode, source string
}

func (c *ceFlags) register(f *flags) {
	f.String(&c.mode, "cloudevents", "off", "send events as CloudEvents 1.0: binary (attributes as headers, the payload as it is), structured (the JSON event format, application/cloudevents+json) or off; a --route rule may say +cloudevents=MODE after its sink instead")
	f.String(&c.source, "cloudevents-source", cloudevents.DefaultSource, "the CloudEvents source attribute (a URI reference); an event's ce-source header takes its place")
}

// check reports a bad mode or source, and binary mode on a sink that
// cannot carry it: the sink of --sink, or each rule's.
func (c *ceFlags) check(sink string, rules []route.Rule) error {
	var errs problems
	mode, err := cloudevents.ParseMode(c.mode)
	if err != nil {
		errs.add(usageError("invalid value for --cloudevents (%s): %v", envName("cloudevents"), err))
	}
	if err := (cloudevents.Config{Source: c.source}).Check(); err != nil {
		errs.add(usageError("invalid value for --cloudevents-source (%s): %v", envName("cloudevents-source"), err))
	}
	if len(rules) == 0 {
		if s, ok := sinks.Named(sink); ok {
			if err := s.CloudEvents.Check(mode); err != nil {
				errs.add(usageError("--cloudevents (%s) %s with --sink %s: %v", envName("cloudevents"), mode, sink, err))
			}
		}
		return errs.err()
	}
	for _, r := range rules {
		s, ok := sinks.Named(r.Sink)
		if !ok {
			continue // reported by checkRoutes
		}
		if r.CloudEvents != "" {
			if err := s.CloudEvents.Check(r.CloudEvents); err != nil {
				errs.add(usageError("--route (%s) %s: %v", envName("route"), r, err))
			}
		} else if err := s.CloudEvents.Check(mode); err != nil {
			errs.add(usageError("--cloudevents (%s) %s for --route %s: %v; add +cloudevents=structured or +cloudevents=off after its sink", envName("cloudevents"), mode, r, err))
		}
	}
	return errs.err()
}

// config returns how the named sink's events travel; check has passed.
func (c *ceFlags) config(sink string) cloudevents.Config {
	s, _ := sinks.Named(sink)
	mode, _ := cloudevents.ParseMode(c.mode)
	return cloudevents.Config{Mode: mode, Binding: s.CloudEvents, Source: c.source}
}

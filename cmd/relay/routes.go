package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
	"github.com/outboxrelay/outboxrelay/publishers/route"
	"github.com/outboxrelay/outboxrelay/relay"
)

// routeFlags are --route and --routes-file: rules that send each topic to
// a sink, for a relay that feeds several (publishers/route).
type routeFlags struct {
	rules []string // --route, each PATTERN=SINK[+cloudevents=MODE][:DESTINATION]
	file  string   // --routes-file
}

func (r *routeFlags) register(f *flags) {
	f.Strings(&r.rules, "route", "send the topics matching PATTERN (* stands for any run of characters) to SINK, at DESTINATION ({topic} is the event's topic; default {topic}); the first matching rule wins; repeat the flag for more rules (the variable takes them separated by spaces or newlines); a topic no rule matches fails with a reason; replaces --sink; SINK+cloudevents=binary|structured|off sets the rule's --cloudevents")
	f.String(&r.file, "routes-file", "", "read more --route rules from this file, one per line, after those of --route; # starts a comment")
}

// parse returns the rules of --route and --routes-file, in order; none
// when neither is set.
func (r *routeFlags) parse() ([]route.Rule, error) {
	var errs problems
	var rules []route.Rule
	add := func(s, where string) {
		rule, err := route.ParseRule(s)
		if err != nil {
			errs.add(usageError("invalid %s: %v", where, err))
			return
		}
		rules = append(rules, rule)
	}
	for _, s := range r.rules {
		add(s, fmt.Sprintf("--route (%s)", envName("route")))
	}
	if r.file != "" {
		lines, err := readRuleLines(r.file)
		if err != nil {
			errs.add(usageError("invalid value for --routes-file (%s): %v", envName("routes-file"), err))
		}
		for _, l := range lines {
			add(l.text, fmt.Sprintf("rule at %s:%d", r.file, l.n))
		}
	}
	return rules, errs.err()
}

type ruleLine struct {
	n    int
	text string
}

// readRuleLines returns the rules of a routes file: its lines without
// comments and blanks.
func readRuleLines(path string) ([]ruleLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []ruleLine
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		if text = strings.TrimSpace(text); text != "" {
			out = append(out, ruleLine{n, text})
		}
	}
	return out, sc.Err()
}

// sinksOf returns the names of the sinks rules use, each once, in order of
// first use.
func sinksOf(rules []route.Rule) []string {
	var names []string
	for _, r := range rules {
		if !slices.Contains(names, r.Sink) {
			names = append(names, r.Sink)
		}
	}
	return names
}

// checkRoutes reports what can be known wrong with rules before start: a
// sink that is not registered, a sink whose flags are bad, and an ordered
// topic or pattern that no rule matches (none of its topics has a rule).
func (o *runOptions) checkRoutes(rules []route.Rule, rc relay.Config) error {
	var errs problems
	for _, name := range sinksOf(rules) {
		if _, ok := sinks.Named(name); !ok {
			errs.add(usageError("--route (%s) names the sink %q; use %s", envName("route"), name, sinkNames()))
			continue
		}
		errs.add(o.sinks.check(name, rc))
	}
	for _, pattern := range rc.Ordering.Topics {
		if !slices.ContainsFunc(rules, func(r route.Rule) bool { return r.Overlaps(pattern) }) {
			errs.add(usageError("--ordered-topics names %q, which no --route rule matches; add one (or a catch-all \"*=SINK\")", pattern))
		}
	}
	return errs.err()
}

// openRoutes opens every sink rules use and returns a router over them. On
// an error it closes the sinks it opened.
func (o *runOptions) openRoutes(rules []route.Rule, rc relay.Config, logger *slog.Logger, stdout io.Writer) (publishers.Publisher, error) {
	opened := map[string]route.Sink{}
	closeAll := func() {
		for _, s := range opened {
			_ = s.Close()
		}
	}
	events := map[string]cloudevents.Config{}
	for _, name := range sinksOf(rules) {
		events[name] = o.ce.config(name)
		pub, err := o.sinks.open(name, rc, logger.With("sink", name), stdout)
		if err != nil {
			closeAll()
			return nil, err
		}
		opened[name] = o.metrics.wrap(name, o.tracing.wrap(name, pub))
	}
	rt, err := route.New(rules, opened, events)
	if err != nil {
		closeAll()
		return nil, usageError("--route (%s): %v", envName("route"), err)
	}
	ruleText := make([]string, len(rules))
	for i, r := range rules {
		ruleText[i] = r.String()
	}
	if !slices.ContainsFunc(rules, func(r route.Rule) bool { return r.Pattern == "*" }) {
		logger.Info("routes have no catch-all rule: events of other topics fail with the reason \"no route for the topic\"")
	}
	logger.Info("routes", "rules", ruleText)
	return rt, nil
}

// openSink opens the publisher relay run publishes to: the router over the
// sinks of --route, or the one --sink names.
func (o *runOptions) openSink(rc relay.Config, logger *slog.Logger, stdout io.Writer) (publishers.Publisher, error) {
	if len(o.rules) > 0 {
		return o.openRoutes(o.rules, rc, logger, stdout)
	}
	pub, err := o.sinks.open(o.sink, rc, logger, stdout)
	if err != nil {
		return nil, err
	}
	pub = o.metrics.wrap(o.sink, o.tracing.wrap(o.sink, pub))
	if ce := o.ce.config(o.sink); ce.Mode.On() {
		logger.Info("cloudevents", "mode", ce.Mode, "source", ce.Source, "binding", ce.Binding.Name)
		return cloudevents.Wrap(pub, ce) // checked by config
	}
	return pub, nil
}

// sinkName describes where events go, for the log: the sink, or
// "routes: kafka, nats".
func (o *runOptions) sinkName() string {
	if len(o.rules) > 0 {
		return "routes: " + strings.Join(sinksOf(o.rules), ", ")
	}
	return o.sink
}

package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
)

// helpSection is a group of a command's flags in its help: `relay run
// --help` prints the first section in full and one line per other
// section; `relay run --help NAME` prints that section, `--help all`
// every flag.
type helpSection struct {
	name, about string
	flags       []string
}

// runSections are relay run's flags by section; each sink's flags (named
// after it: --kafka-brokers) follow, a section per sink. Every flag is in
// exactly one section (TestRunHelpSections).
func runSections() []helpSection {
	sections := []helpSection{
		{"core", "what most deployments set", []string{"database-url", "schema", "table", "tables", "sink", "route", "routes-file",
			"ordered-topics", "retention", "metrics-addr", "log-level", "log-format"}},
		{"delivery", "batches, leases, retries, shutdown", []string{"workers", "batch-size", "lease", "max-attempts", "backoff-min", "backoff-max",
			"publish-timeout", "shutdown-timeout", "max-event-bytes", "relay-id", "claim-mode"}},
		{"ordered", "per-key ordered delivery (docs/ordering.md)", []string{"shards", "ordered-loops", "head-of-line", "shard-budget"}},
		{"retention", "the janitor of sent rows", []string{"keep-sent", "janitor-interval", "janitor-batch", "janitor-vacuum"}},
		{"observe", "metrics, profiles, the observer's file", []string{"metrics-backlog-interval", "metrics-backlog-limit", "metrics-max-topics",
			"observe-file", "pprof-addr", "pprof-allow-remote"}},
		{"cloudevents", "events as CloudEvents 1.0", []string{"cloudevents", "cloudevents-source"}},
		{"tuning", "claims, polling, outages: the defaults rarely need a change", []string{"batch-min", "batch-bytes", "poll-interval", "poll-min",
			"listen", "outage-backoff-min", "outage-backoff-max", "probe-interval"}},
	}
	for _, s := range sinks.All() {
		sections = append(sections, helpSection{name: s.Name, about: "the " + s.Name + " sink"})
	}
	return sections
}

// withSinkFlags fills each sink's section with the flags named after it.
func withSinkFlags(sections []helpSection, all []string) []helpSection {
	var out []helpSection
	for _, s := range sections {
		if s.flags == nil {
			for _, name := range all {
				if strings.HasPrefix(name, s.name+"-") {
					s.flags = append(s.flags, name)
				}
			}
		}
		if len(s.flags) > 0 { // the stdout sink has none
			out = append(out, s)
		}
	}
	return out
}

// printHelp writes the synopsis and the flags of section: "" is the
// first section in full and a line per other section, "all" every flag.
func (f *flags) printHelp(w io.Writer, section string) error {
	var all []string
	f.fs.VisitAll(func(fl *flag.Flag) { all = append(all, fl.Name) })
	if f.sections == nil || section == "all" {
		f.printFlags(w, f.synopsis, "Flags:", all)
		return nil
	}
	sections := withSinkFlags(f.sections, all)
	if section != "" {
		i := slices.IndexFunc(sections, func(s helpSection) bool { return s.name == section })
		if i < 0 {
			var names []string
			for _, s := range sections {
				names = append(names, s.name)
			}
			return usageError("unknown help section %q: %s, or all", section, strings.Join(names, ", "))
		}
		f.printFlags(w, "", fmt.Sprintf("Flags of %s --help %s (%s):", f.fs.Name(), section, sections[i].about), sections[i].flags)
		return nil
	}
	f.printFlags(w, f.synopsis, "Flags ("+sections[0].about+"):", sections[0].flags)
	fmt.Fprintf(w, "\nMore flags, by section: %s --help SECTION shows one, %s --help all every flag.\n", f.fs.Name(), f.fs.Name())
	var sinkNames []string
	for _, s := range sections[1:] {
		if _, ok := sinks.Named(s.name); ok { // one line names every sink's section
			sinkNames = append(sinkNames, s.name)
			continue
		}
		fmt.Fprintf(w, "  %-10s %s\n%s", s.name, s.about, wrap("--"+strings.Join(s.flags, " --"), "             ", 100))
	}
	fmt.Fprintf(w, "  %-10s %s\n", "SINK", "a sink's flags (--SINK-...): "+strings.Join(sinkNames, ", "))
	return nil
}

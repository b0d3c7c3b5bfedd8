package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// Every registered sink has a name of its own, and every flag it adds is
// named after it, so that sinks cannot collide.
func TestSinkRegistry(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, s := range sinks {
		if s.name == "" || seen[s.name] {
			t.Errorf("sink %q: empty or registered twice", s.name)
		}
		seen[s.name] = true
		f := newFlags("test", "", io.Discard, func(string) string { return "" })
		if s.flags(f) == nil {
			t.Errorf("sink %s: flags returned no settings", s.name)
		}
		f.fs.VisitAll(func(fl *flag.Flag) {
			if !strings.HasPrefix(fl.Name, s.name+"-") {
				t.Errorf("sink %s registers --%s, which is not named --%s-...", s.name, fl.Name, s.name)
			}
		})
		if !strings.Contains(sinkHelp(), s.name) || !strings.Contains(sinkNames(), s.name) {
			t.Errorf("sink %s is missing from --sink's help %q or its error %q", s.name, sinkHelp(), sinkNames())
		}
	}
}

func TestOrList(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"kafka"}, "kafka"},
		{[]string{"kafka", "stdout"}, "kafka or stdout"},
		{[]string{"kafka", "nats", "stdout"}, "kafka, nats or stdout"},
	} {
		if got := orList(c.in, " or "); got != c.want {
			t.Errorf("orList(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

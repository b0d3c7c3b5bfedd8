package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// relay run --help shows the core flags in full, every other flag but the
// sinks' by name, in its section, and each sink's section by name; --help
// SECTION shows one section in full. Every flag is in exactly one
// section, and the first screen names it or its sink's section.
func TestRunHelpSections(t *testing.T) {
	t.Parallel()
	all := map[string]bool{}
	for _, hf := range helpFlags(t, "run", "--help", "all") {
		all[hf.name] = true
	}
	_, short, _ := invoke(context.Background(), nil, "run", "--help")
	if n := strings.Count(short, "\n"); n > 100 {
		t.Errorf("relay run --help is %d lines, want at most 100", n)
	}
	_, more, ok := strings.Cut(short, "\nMore flags, by section")
	sections := regexp.MustCompile(`(?m)^  ([a-z]+) +\S`).FindAllStringSubmatch(more, -1)
	if !ok || len(sections) < 6 {
		t.Fatalf("relay run --help lists sections %q:\n%s", sections, short)
	}
	sinkLine := regexp.MustCompile(`(?m)^  SINK +a sink's flags \(--SINK-\.\.\.\): (.*)$`).FindStringSubmatch(more)
	if sinkLine == nil {
		t.Fatalf("relay run --help names no sink sections:\n%s", short)
	}
	sinkSections := strings.Split(sinkLine[1], ", ")
	for _, name := range sinkSections {
		sections = append(sections, []string{"", name})
	}
	seen := map[string]string{}
	for _, m := range sections {
		section := m[1]
		for _, hf := range helpFlags(t, "run", "--help", section) {
			if prev, ok := seen[hf.name]; ok {
				t.Errorf("--%s is in sections %s and %s", hf.name, prev, section)
			}
			seen[hf.name] = section
			if slices.Contains(sinkSections, section) {
				continue // named by its section
			}
			if !strings.Contains(short, "--"+hf.name+" ") && !strings.Contains(short, "--"+hf.name+"\n") {
				t.Errorf("relay run --help does not name --%s (section %s)", hf.name, section)
			}
		}
	}
	for _, hf := range helpFlags(t, "run", "--help") {
		if prev, ok := seen[hf.name]; ok {
			t.Errorf("--%s is in the core and in section %s", hf.name, prev)
		}
		seen[hf.name] = "core"
	}
	for name := range all {
		if seen[name] == "" {
			t.Errorf("--%s is in no section of relay run --help", name)
		}
	}
	for name := range seen {
		if !all[name] {
			t.Errorf("--%s is in a section but not in relay run --help all", name)
		}
	}
	if code, _, stderr := invoke(context.Background(), nil, "run", "--help", "nope"); code != 2 || !strings.Contains(stderr, `unknown help section "nope": core, delivery`) {
		t.Errorf("relay run --help nope: exit %d, %s", code, stderr)
	}
}

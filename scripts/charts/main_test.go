package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestThousands(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{
		0: "0", 999: "999", 1000: "1,000", 52650: "52,650", 1234567: "1,234,567", -40000: "-40,000", 2.5: "2.5",
	} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

// The charts of docs/benchmarks.md can be drawn from the runs saved in
// docs/bench.
func TestChartsFromSavedRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		in   string
		plot func([]report) error
	}{
		{"../../docs/bench/burndown-1m-lease-floor-final-1.json", func(r []report) error { _, err := burndownPlot(r); return err }},
		{"../../docs/bench/steady-floor-1.json", func(r []report) error { _, err := latencyPlot(r); return err }},
	} {
		reps, err := load(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.plot(reps); err != nil {
			t.Errorf("%s: %v", c.in, err)
		}
	}
	out := filepath.Join(dir, "burndown.png")
	if err := draw("../../docs/bench/burndown-1m-lease-floor-final-1.json", out, burndownPlot); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() < 1000 {
		t.Errorf("chart %s: %v, %v", out, fi, err)
	}
	if _, err := latencyPlot([]report{{Mode: "steady"}}); err == nil {
		t.Error("a report without steady runs drew a latency chart")
	}
}

// The ordered chart reads go test -bench output: every (relays, keys) of
// the saved run, with each ordered mode as a ratio of unordered.
func TestOrderedFromSavedRun(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../docs/bench/ordered/ordered-vs-unordered-20k.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	run, err := parseOrdered(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.groups) != 6 || len(run.rate["ordered"]) != 6 || len(run.rate["ordered-per-key"]) != 6 {
		t.Fatalf("parsed %d groups, %d ordered and %d per-key results; want 6 of each", len(run.groups), len(run.rate["ordered"]), len(run.rate["ordered-per-key"]))
	}
	if g := run.groups[0]; g != (orderedGroup{1, 10}) || run.rate["unordered"][g] <= 0 {
		t.Errorf("first group %v at %v events/s unordered, want 1 relay, 10 keys, a rate", g, run.rate["unordered"][g])
	}
	if _, err := orderedPlot(run); err != nil {
		t.Error(err)
	}
	if _, err := parseOrdered(strings.NewReader("PASS\n")); err == nil {
		t.Error("an output without results parsed")
	}
}

// A run with -count gives each mode's median.
func TestOrderedMedianOfRepeatedResults(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	for _, r := range []struct {
		mode string
		rate int
	}{{"unordered", 300}, {"ordered", 50}, {"unordered", 100}, {"ordered", 90}, {"unordered", 200}, {"ordered", 70}, {"ordered", 80}} {
		fmt.Fprintf(&out, "BenchmarkOrderedVsUnordered/mode=%s/relays=1/keys=10-2 \t 20000\t 1 ns/op\t %d events/s\n", r.mode, r.rate)
	}
	run, err := parseOrdered(strings.NewReader(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	g := orderedGroup{1, 10}
	if u, o := run.rate["unordered"][g], run.rate["ordered"][g]; u != 200 || o != 75 {
		t.Errorf("unordered %v, ordered %v events/s; want the medians 200 and 75", u, o)
	}
}

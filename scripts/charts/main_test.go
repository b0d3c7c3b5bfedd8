package main

import (
	"os"
	"path/filepath"
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

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// orderedLine matches a result line of BenchmarkOrderedVsUnordered in the
// output of go test -bench: its mode, relays, keys and events/s.
var orderedLine = regexp.MustCompile(`^BenchmarkOrderedVsUnordered/mode=([a-z-]+)/relays=(\d+)/keys=(\d+)\S*\s.*\s([\d.]+) events/s`)

// orderedGroup is one (relays, keys) pair of the benchmark.
type orderedGroup struct{ relays, keys int }

func (g orderedGroup) String() string {
	relays := "relays"
	if g.relays == 1 {
		relays = "relay"
	}
	return fmt.Sprintf("%d %s\n%s keys", g.relays, relays, thousands(float64(g.keys)))
}

// orderedRun is one benchmark output: events/s by mode and group (the
// median of a group's results when the run repeated it, -count), and the
// groups in the order they ran.
type orderedRun struct {
	rate   map[string]map[orderedGroup]float64
	groups []orderedGroup
}

// parseOrdered reads the output of
// go test ./integration -bench OrderedVsUnordered.
func parseOrdered(r io.Reader) (orderedRun, error) {
	run := orderedRun{rate: map[string]map[orderedGroup]float64{}}
	seen := map[orderedGroup]bool{}
	all := map[string]map[orderedGroup][]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := orderedLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		relays, _ := strconv.Atoi(m[2])
		keys, _ := strconv.Atoi(m[3])
		rate, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			return run, fmt.Errorf("charts: %q: %w", sc.Text(), err)
		}
		g := orderedGroup{relays, keys}
		if !seen[g] {
			seen[g] = true
			run.groups = append(run.groups, g)
		}
		if all[m[1]] == nil {
			all[m[1]] = map[orderedGroup][]float64{}
		}
		all[m[1]][g] = append(all[m[1]][g], rate)
	}
	if err := sc.Err(); err != nil {
		return run, err
	}
	for mode, groups := range all {
		run.rate[mode] = map[orderedGroup]float64{}
		for g, rates := range groups {
			run.rate[mode][g] = median(rates)
		}
	}
	if len(run.rate["unordered"]) == 0 {
		return run, fmt.Errorf("charts: no mode=unordered results of BenchmarkOrderedVsUnordered")
	}
	return run, nil
}

// orderedPlot draws, per (relays, keys), each ordered mode's events/s as a
// ratio of unordered's in the same run.
func orderedPlot(run orderedRun) (*plot.Plot, error) {
	var names []string
	for _, mode := range []string{"ordered", "ordered-per-key"} {
		if len(run.rate[mode]) > 0 {
			names = append(names, mode)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no ordered results")
	}
	var labels []string
	values := make([]plotter.Values, len(names))
	for _, g := range run.groups {
		base := run.rate["unordered"][g]
		if base == 0 {
			continue
		}
		labels = append(labels, g.String())
		for i, mode := range names {
			values[i] = append(values[i], run.rate[mode][g]/base)
		}
	}
	p := plot.New()
	p.Title.Text = "Ordered / unordered events/s, same run"
	p.Y.Label.Text = "ratio"
	p.Y.Min = 0
	return groupedBars(p, labels, names, values)
}

// drawOrdered writes <prefix>ordered.png from a saved benchmark output.
func drawOrdered(in, out, prefix string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	run, err := parseOrdered(f)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	p, err := orderedPlot(run)
	if err != nil {
		return fmt.Errorf("charts: %s: %w", in, err)
	}
	file := filepath.Join(out, prefix+"ordered.png")
	return p.Save(20*vg.Centimeter, 10*vg.Centimeter, file)
}

// median is the middle of xs, or the mean of the two middle ones.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

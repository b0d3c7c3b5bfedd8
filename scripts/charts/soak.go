package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// soakRun is the part of a `relay-bench soak --json` report the soak
// charts read: the samples of its first run.
type soakRun struct {
	Runs []struct {
		Soak *struct {
			Samples []soakSample `json:"samples"`
		} `json:"soak"`
	} `json:"runs"`
}

type soakSample struct {
	ElapsedS    float64      `json:"elapsed_s"`
	SizeBytes   int64        `json:"size_bytes"`
	DeadTuples  int64        `json:"dead_tuples"`
	Autovacuums int64        `json:"autovacuums"`
	Claim       *percentiles `json:"claim_ms"`
	Latency     *percentiles `json:"latency_ms"`
}

type percentiles struct {
	P50, P99 float64
}

// soakSeries is one labelled soak report.
type soakSeries struct {
	label   string
	samples []soakSample
}

// loadSoaks reads "label=path,label=path".
func loadSoaks(spec string) ([]soakSeries, error) {
	var all []soakSeries
	for _, item := range strings.Split(spec, ",") {
		label, path, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("charts: -soak %q: want label=path", item)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var r soakRun
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("charts: %s: %w", path, err)
		}
		if len(r.Runs) == 0 || r.Runs[0].Soak == nil {
			return nil, fmt.Errorf("charts: %s: not a soak report", path)
		}
		all = append(all, soakSeries{label: label, samples: r.Runs[0].Soak.Samples})
	}
	return all, nil
}

// drawSoaks writes <prefix>soak-size.png (table and index size),
// <prefix>soak-claim.png (claim p99) and <prefix>soak-latency.png
// (end-to-end p99), each over minutes, one line per soak.
func drawSoaks(spec, out, prefix string) error {
	soaks, err := loadSoaks(spec)
	if err != nil {
		return err
	}
	charts := []struct {
		file, title, y string
		value          func(soakSample) (float64, bool)
	}{
		{"soak-size.png", "Table and index size", "MB", func(s soakSample) (float64, bool) { return float64(s.SizeBytes) / 1e6, true }},
		{"soak-claim.png", "Claim p99 per window", "ms", func(s soakSample) (float64, bool) {
			if s.Claim == nil {
				return 0, false
			}
			return s.Claim.P99, true
		}},
		{"soak-latency.png", "End-to-end p99 per window", "ms", func(s soakSample) (float64, bool) {
			if s.Latency == nil {
				return 0, false
			}
			return s.Latency.P99, true
		}},
	}
	for _, c := range charts {
		p := plot.New()
		p.Title.Text = c.title
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = c.y
		p.Y.Min = 0
		p.Legend.Top = true
		for i, s := range soaks {
			var pts plotter.XYs
			for _, smp := range s.samples {
				if v, ok := c.value(smp); ok {
					pts = append(pts, plotter.XY{X: smp.ElapsedS / 60, Y: v})
				}
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("charts: %s: %w", s.label, err)
			}
			line.Color = palette[i%len(palette)]
			line.Width = vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(s.label, line)
		}
		path := filepath.Join(out, prefix+c.file)
		if err := p.Save(16*vg.Centimeter, 9*vg.Centimeter, path); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", path)
	}
	return nil
}

// Command charts draws the charts of docs/benchmarks.md from the JSON that
// `relay-bench ... --json` prints, with gonum/plot. It is a module of its own,
// so that the plotting library stays out of the relay's go.mod; from the
// repository's root:
//
//	go run ./cmd/relay-bench burn-down --events 1000000 --relays 1 --batch-size 1000 --json > docs/bench/burndown-1m.json
//	go run ./cmd/relay-bench steady --rate 2000 --duration 60s --json > docs/bench/steady.json
//	cd scripts/charts && go run . -burndown ../../docs/bench/burndown-1m.json -steady ../../docs/bench/steady.json -out ../../docs/img
//
// -burndown takes one report or a JSON array of reports (each run one
// bar group: the relay's events/s beside the SQL ceiling its report
// measured) and writes burndown.png. -steady takes one report or an array
// (each run one group of latency percentiles) and writes latency.png.
// -soak takes labelled soak reports, "partitions=a.json,delete=b.json",
// and writes soak-size.png, soak-claim.png and soak-latency.png, one line
// per report. -name-prefix prefixes the file names. Any input may be
// omitted.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"log"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// report is the part of `relay-bench --json` the charts read.
type report struct {
	Mode    string `json:"mode"`
	Ceiling []struct {
		Lifecycle       string  `json:"lifecycle"`
		Clients         int     `json:"clients"`
		EventsPerSecond float64 `json:"events_per_s"`
	} `json:"ceiling"`
	Runs []struct {
		Relays          int     `json:"relays"`
		BatchSize       int     `json:"batch_size"`
		EventsPerSecond float64 `json:"events_per_s"`
		Steady          *struct {
			TargetRate int `json:"target_rate"`
			Latency    *struct {
				P50, P95, P99, Max float64
			} `json:"latency_ms"`
		} `json:"steady"`
	} `json:"runs"`
}

func main() {
	burndown := flag.String("burndown", "", "JSON of burn-down reports (one, or an array)")
	steady := flag.String("steady", "", "JSON of steady reports (one, or an array)")
	out := flag.String("out", "docs/img", "directory for the PNG files")
	soaks := flag.String("soak", "", "labelled soak reports: label=path,label=path")
	ordered := flag.String("ordered", "", "output of go test ./integration -bench OrderedVsUnordered")
	prefix := flag.String("name-prefix", "", "prefix of the file names")
	flag.Parse()
	if *burndown == "" && *steady == "" && *soaks == "" && *ordered == "" {
		log.Fatal("charts: give -burndown, -steady, -soak and/or -ordered")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	if *burndown != "" {
		if err := draw(*burndown, filepath.Join(*out, *prefix+"burndown.png"), burndownPlot); err != nil {
			log.Fatal(err)
		}
	}
	if *steady != "" {
		if err := draw(*steady, filepath.Join(*out, *prefix+"latency.png"), latencyPlot); err != nil {
			log.Fatal(err)
		}
	}
	if *soaks != "" {
		if err := drawSoaks(*soaks, *out, *prefix); err != nil {
			log.Fatal(err)
		}
	}
	if *ordered != "" {
		if err := drawOrdered(*ordered, *out, *prefix); err != nil {
			log.Fatal(err)
		}
	}
}

// draw loads the reports of in, plots them and saves the plot to out.
func draw(in, out string, plotOf func([]report) (*plot.Plot, error)) error {
	reps, err := load(in)
	if err != nil {
		return err
	}
	p, err := plotOf(reps)
	if err != nil {
		return fmt.Errorf("charts: %s: %w", in, err)
	}
	if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, out); err != nil {
		return err
	}
	log.Printf("wrote %s", out)
	return nil
}

// load reads one report or an array of them.
func load(path string) ([]report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reps []report
	if err := json.Unmarshal(data, &reps); err == nil && len(reps) > 0 {
		return reps, nil
	}
	var one report
	if err := json.Unmarshal(data, &one); err != nil {
		return nil, fmt.Errorf("charts: %s: %w", path, err)
	}
	return []report{one}, nil
}

// Series colours, the same across charts.
var palette = []color.Color{
	color.RGBA{0x3b, 0x6e, 0xb5, 0xff}, // blue
	color.RGBA{0xe0, 0x8a, 0x2c, 0xff}, // orange
	color.RGBA{0x3d, 0x9a, 0x5b, 0xff}, // green
	color.RGBA{0xc0, 0x39, 0x2b, 0xff}, // red
}

// burndownPlot groups, per run, the relay's events/s and the mark-sent
// ceiling with one client that its report measured.
func burndownPlot(reps []report) (*plot.Plot, error) {
	series := []struct {
		name   string
		values plotter.Values
	}{{name: "relay"}, {name: "SQL ceiling, 1 client"}}
	var labels []string
	for _, rep := range reps {
		ceiling := markSent(rep.Ceiling)
		for _, r := range rep.Runs {
			labels = append(labels, fmt.Sprintf("run %d: %d relay(s), batch %d", len(labels)+1, r.Relays, r.BatchSize))
			series[0].values = append(series[0].values, r.EventsPerSecond)
			series[1].values = append(series[1].values, ceiling)
		}
	}
	if len(labels) == 0 {
		return nil, errors.New("no burn-down runs")
	}
	p := plot.New()
	p.Title.Text = "Burn-down throughput against the SQL ceiling of the same run"
	p.Y.Label.Text = "events per second"
	p.Y.Min = 0
	return groupedBars(p, labels, []string{series[0].name, series[1].name},
		[]plotter.Values{series[0].values, series[1].values})
}

// markSent returns the claim + mark-sent ceiling with one client, or 0.
func markSent(ceilings []struct {
	Lifecycle       string  `json:"lifecycle"`
	Clients         int     `json:"clients"`
	EventsPerSecond float64 `json:"events_per_s"`
}) float64 {
	for _, c := range ceilings {
		if c.Lifecycle == "mark_sent" && c.Clients == 1 {
			return c.EventsPerSecond
		}
	}
	return 0
}

// latencyPlot groups, per steady run, its latency percentiles.
func latencyPlot(reps []report) (*plot.Plot, error) {
	names := []string{"p50", "p95", "p99"}
	values := make([]plotter.Values, len(names))
	var labels []string
	rate := 0
	for _, rep := range reps {
		for _, r := range rep.Runs {
			if r.Steady == nil || r.Steady.Latency == nil {
				continue
			}
			l := r.Steady.Latency
			rate = r.Steady.TargetRate
			labels = append(labels, fmt.Sprintf("run %d", len(labels)+1))
			values[0] = append(values[0], l.P50)
			values[1] = append(values[1], l.P95)
			values[2] = append(values[2], l.P99)
		}
	}
	if len(labels) == 0 {
		return nil, errors.New("no steady runs with latency")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Commit-to-consumer latency at %d events/s, 1 relay", rate)
	p.Y.Label.Text = "milliseconds"
	p.Y.Min = 0
	return groupedBars(p, labels, names, values)
}

// groupedBars adds one bar series per name, grouped by label, with a
// legend, and names the groups on the X axis.
func groupedBars(p *plot.Plot, labels, names []string, values []plotter.Values) (*plot.Plot, error) {
	width := vg.Points(60 / float64(len(names)))
	for i, name := range names {
		bars, err := plotter.NewBarChart(values[i], width)
		if err != nil {
			return nil, err
		}
		bars.LineStyle.Width = 0
		bars.Color = palette[i%len(palette)]
		bars.Offset = width * vg.Length(float64(i)-float64(len(names)-1)/2)
		p.Add(bars)
		p.Legend.Add(name, bars)
	}
	// Room above the bars for the legend.
	top := 0.0
	for _, vs := range values {
		for _, v := range vs {
			top = max(top, v)
		}
	}
	p.Y.Max = top * 1.4
	p.Y.Tick.Marker = plainTicks{}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	p.NominalX(labels...)
	return p, nil
}

// plainTicks are gonum's default ticks labelled without needless decimals
// and with thousands separated: 50,000 rather than 50000.00.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = thousands(ticks[i].Value)
		}
	}
	return ticks
}

// thousands formats v with at most one decimal and a comma every three
// digits.
func thousands(v float64) string {
	if v != float64(int64(v)) {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	s := strconv.FormatInt(int64(v), 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

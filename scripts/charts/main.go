// Command charts draws the PNG charts of docs/benchmarks.md from the JSON
// that `relay bench --json` prints:
//
//	relay bench burn-down --relays 1,2,4 --json > docs/bench/burndown.json
//	relay bench steady --json > docs/bench/steady.json
//	go run ./scripts/charts -burndown docs/bench/burndown.json -steady docs/bench/steady.json -out docs/img
//
// It writes throughput-by-relays.png (burn-down events/s per relay count,
// with the SQL ceiling of the same run as a line) and latency.png (steady
// end-to-end latency percentiles per run; -latency-name names it). Either
// input may be omitted.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"log"
	"math"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// report is the part of `relay bench --json` the charts read.
type report struct {
	Mode     string `json:"mode"`
	Settings struct {
		RelayArgs []string `json:"relay_args"`
	} `json:"settings"`
	Ceiling []struct {
		Lifecycle       string  `json:"lifecycle"`
		Clients         int     `json:"clients"`
		EventsPerSecond float64 `json:"events_per_s"`
	} `json:"ceiling"`
	Runs []struct {
		Relays          int      `json:"relays"`
		BatchSize       int      `json:"batch_size"`
		EventsPerSecond float64  `json:"events_per_s"`
		CeilingRatio    *float64 `json:"ceiling_ratio"`
		Steady          *struct {
			TargetRate int `json:"target_rate"`
			Latency    *struct {
				P50, P95, P99, Max float64
			} `json:"latency_ms"`
		} `json:"steady"`
	} `json:"runs"`
}

func main() {
	burndown := flag.String("burndown", "", "JSON of a burn-down run")
	steady := flag.String("steady", "", "JSON of one or more steady runs (a report, or a JSON array of reports)")
	out := flag.String("out", "docs/img", "directory for the PNG files")
	latencyName := flag.String("latency-name", "latency.png", "file name of the latency chart in -out")
	flag.Parse()
	if *burndown == "" && *steady == "" {
		log.Fatal("charts: give -burndown and/or -steady")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	if *burndown != "" {
		reps, err := load(*burndown)
		if err != nil {
			log.Fatal(err)
		}
		if err := write(filepath.Join(*out, "throughput-by-relays.png"), throughputChart(reps[0])); err != nil {
			log.Fatal(err)
		}
	}
	if *steady != "" {
		reps, err := load(*steady)
		if err != nil {
			log.Fatal(err)
		}
		if err := write(filepath.Join(*out, *latencyName), latencyChart(reps)); err != nil {
			log.Fatal(err)
		}
	}
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

func write(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	log.Printf("wrote %s", path)
	return f.Close()
}

// bar is one bar of a chart.
type bar struct {
	label string
	value float64
	color color.Color
}

var (
	blue   = color.RGBA{0x3b, 0x6e, 0xb5, 0xff}
	orange = color.RGBA{0xe0, 0x8a, 0x2c, 0xff}
	green  = color.RGBA{0x3d, 0x9a, 0x5b, 0xff}
	red    = color.RGBA{0xc0, 0x39, 0x2b, 0xff}
	grey   = color.RGBA{0x99, 0x99, 0x99, 0xff}
)

func throughputChart(rep report) image.Image {
	var bars []bar
	for _, r := range rep.Runs {
		label := fmt.Sprintf("%d relay(s)", r.Relays)
		if r.CeilingRatio != nil {
			label += fmt.Sprintf(" (%.2fx)", *r.CeilingRatio)
		}
		bars = append(bars, bar{label, r.EventsPerSecond, blue})
	}
	var lines []hline
	for _, c := range rep.Ceiling {
		if c.Lifecycle == "mark_sent" && c.Clients == 1 {
			lines = append(lines, hline{fmt.Sprintf("SQL ceiling, claim + mark-sent, 1 client: %.0f/s", c.EventsPerSecond), c.EventsPerSecond})
		}
	}
	return barChart("burn-down throughput (events/s) by relay count", bars, lines, "%.0f")
}

func latencyChart(reps []report) image.Image {
	type run struct {
		wake    string
		rate    int
		p50     float64
		p95     float64
		p99     float64
		max     float64
		ordinal int
	}
	var runs []run
	wakes := map[string]bool{}
	for _, rep := range reps {
		wake := "listen"
		if slices.Contains(rep.Settings.RelayArgs, "--listen=false") {
			wake = "poll"
		}
		for _, r := range rep.Runs {
			if r.Steady == nil || r.Steady.Latency == nil {
				continue
			}
			l := r.Steady.Latency
			wakes[wake] = true
			runs = append(runs, run{wake, r.Steady.TargetRate, l.P50, l.P95, l.P99, l.Max, len(runs) + 1})
		}
	}
	title := "commit-to-consumer latency (ms), steady rate, 1 relay: woken by LISTEN/NOTIFY vs polling every 500ms"
	if len(wakes) == 1 && len(runs) > 1 {
		title = fmt.Sprintf("commit-to-consumer latency (ms), %d steady runs at %d/s, 1 relay, %s", len(runs), runs[0].rate, map[bool]string{true: "woken by LISTEN/NOTIFY", false: "polling"}[wakes["listen"]])
	}
	var bars []bar
	for _, r := range runs {
		name := fmt.Sprintf("%s %d/s", r.wake, r.rate)
		if len(wakes) == 1 && len(runs) > 1 {
			name = fmt.Sprintf("run %d", r.ordinal)
		}
		bars = append(bars, bar{name + " p50", r.p50, green}, bar{"p95", r.p95, blue},
			bar{"p99", r.p99, orange}, bar{"max", r.max, red})
	}
	return barChart(title, bars, nil, "%.1f")
}

// hline is a horizontal reference line.
type hline struct {
	label string
	value float64
}

// barChart draws bars left to right with value labels, on a linear axis
// from 0.
func barChart(title string, bars []bar, lines []hline, valueFormat string) image.Image {
	const w, h, left, right, top, bottom = 900, 480, 70, 30, 50, 70
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, left, 25, title, color.Black)
	top_ := 0.0
	for _, b := range bars {
		top_ = math.Max(top_, b.value)
	}
	for _, l := range lines {
		top_ = math.Max(top_, l.value)
	}
	if top_ == 0 {
		top_ = 1
	}
	top_ *= 1.15
	y := func(v float64) int { return h - bottom - int(v/top_*float64(h-top-bottom)) }
	// Axes and grid.
	for i := 0; i <= 4; i++ {
		v := top_ * float64(i) / 4
		rect(img, left, y(v), w-right, y(v)+1, color.RGBA{0xe5, 0xe5, 0xe5, 0xff})
		text(img, 5, y(v)+4, fmt.Sprintf(valueFormat, v), grey)
	}
	rect(img, left, top, left+1, h-bottom, color.Black)
	rect(img, left, h-bottom, w-right, h-bottom+1, color.Black)
	if len(bars) > 0 {
		slot := (w - left - right) / len(bars)
		for i, b := range bars {
			x0 := left + i*slot + slot/6
			x1 := left + (i+1)*slot - slot/6
			rect(img, x0, y(b.value), x1, h-bottom, b.color)
			text(img, x0, y(b.value)-5, fmt.Sprintf(valueFormat, b.value), color.Black)
			text(img, x0, h-bottom+18+(i%2)*16, b.label, color.Black)
		}
	}
	for _, l := range lines {
		for x := left; x < w-right; x += 8 {
			rect(img, x, y(l.value), x+5, y(l.value)+2, red)
		}
		text(img, left+8, y(l.value)-6, l.label, red)
	}
	return img
}

func rect(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	draw.Draw(img, image.Rect(x0, y0, x1, y1), &image.Uniform{c}, image.Point{}, draw.Src)
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

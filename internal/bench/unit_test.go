package bench

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/relay"
)

func TestPercentiles(t *testing.T) {
	cases := []struct {
		in   []float64
		want *Percentiles
	}{
		{nil, nil},
		{[]float64{7}, &Percentiles{N: 1, P50: 7, P95: 7, P99: 7, Max: 7}},
		{[]float64{4, 1, 3, 2}, &Percentiles{N: 4, P50: 2, P95: 4, P99: 4, Max: 4}},
	}
	for _, c := range cases {
		got := percentilesOf(c.in)
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("percentilesOf(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i)
	}
	if p := percentilesOf(hundred); p.P50 != 50 || p.P95 != 95 || p.P99 != 99 || p.Max != 100 {
		t.Errorf("percentiles of 1..100: %+v", *p)
	}
}

func TestRelayLog(t *testing.T) {
	l := newRelayLog()
	lines := []string{
		`{"time":"2026-01-01T00:00:00.000Z","level":"INFO","msg":"relay started","batch_size":10}`,
		`{"time":"2026-01-01T00:00:01.000Z","level":"WARN","msg":"database error; retrying"}`,
		`{"time":"2026-01-01T00:00:01.100Z","level":"ERROR","msg":"event failed permanently"}`,
		`{"time":"2026-01-01T00:00:01.200Z","level":"WARN","msg":"database error; retrying"}`,
		`panic: not JSON`,
	}
	l.consume(strings.NewReader(strings.Join(lines, "\n")))
	w := l.addWarnings(nil)
	if len(w) != 2 || w["database error; retrying"] != 2 || w["event failed permanently"] != 1 {
		t.Errorf("warnings %v: want 2 database errors and 1 failed event", w)
	}
	if !strings.Contains(l.lastLines(), "panic: not JSON") {
		t.Errorf("tail lacks the last line:\n%s", l.lastLines())
	}
}

// The relay's observer events in the form of cmd/relay/observe.go (its
// tests check that form; TestBurnDown and the other runs that the real
// relay writes what this reads).
func TestRelayEvents(t *testing.T) {
	ev := newRelayEvents()
	lines := []string{
		`{"time":"2026-01-01T00:00:00.000Z","kind":"claimed","claim":"lease","rows":0,"duration_ms":0.5}`,
		`{"time":"2026-01-01T00:00:00.000Z","kind":"started","relay_id":"r1"}`,
		`{"time":"2026-01-01T00:00:00.004Z","kind":"claimed","claim":"lease","rows":10,"duration_ms":4.5}`,
		`{"time":"2026-01-01T00:00:00.007Z","kind":"published","claim":"lease","rows":10,"duration_ms":3}`,
		`{"time":"2026-01-01T00:00:00.010Z","kind":"recorded","claim":"lease","duration_ms":2.25,"result":{"claimed":10,"sent":10}}`,
		`{"time":"2026-01-01T00:00:00.012Z","kind":"claimed","claim":"lease","rows":10,"duration_ms":1.5}`,
		`{"time":"2026-01-01T00:00:00.020Z","kind":"published","claim":"lease","rows":10,"duration_ms":9}`,
		`{"time":"2026-01-01T00:00:00.030Z","kind":"recorded","claim":"lease","duration_ms":1,"result":{"claimed":10,"sent":10}}`,
		`{"time":"2026-01-01T00:00:00.035Z","kind":"recorded","claim":"lease","duration_ms":1,"result":{"claimed":3,"sent":2}}`,
		`{"time":"2026-01-01T00:00:00.036Z","kind":"dropped","events":7}`,
		`{"time":"2026-01-01T00:00:01.000Z","kind":"recorded","claim":"lease","duration_ms":1,"result":{"claimed":1,"sent":1}}`,
		`{"time":"2026-01-01T00:00:01.100Z","kind":"outage_started","rows":3,"err":"down"}`,
		`{"time":"2026-01-01T00:00:01.2`,
	}
	ev.consume(strings.NewReader(strings.Join(lines, "\n")))
	select {
	case <-ev.started:
	default:
		t.Error("started line not seen")
	}
	var s eventStats
	s.collect(ev, 10)
	if s.batches != 4 {
		t.Errorf("%d batches, want the 4 recorded", s.batches)
	}
	// Cycles only after full batches: 10 -> 30 ms and 30 -> 35 ms; the
	// wait after the partial batch of 3 is a poll, not a cycle.
	if len(s.cycleMS) != 2 || s.cycleMS[0] != 20 || s.cycleMS[1] != 5 {
		t.Errorf("cycles %v, want [20 5]", s.cycleMS)
	}
	// The empty claim is a poll, left out.
	if len(s.claimMS) != 2 || s.claimMS[0] != 4.5 || s.claimMS[1] != 1.5 || len(s.publishMS) != 2 || s.publishMS[1] != 9 ||
		len(s.recordMS) != 4 || s.recordMS[0] != 2.25 {
		t.Errorf("claim %v, publish %v, record %v: want [4.5 1.5], [3 9], [2.25 1 1 1]", s.claimMS, s.publishMS, s.recordMS)
	}
	if batches, claimed := ev.batchCount(); batches != 4 || claimed != 24 {
		t.Errorf("batch count %d claiming %d, want 4 claiming 24", batches, claimed)
	}
	if sent := ev.sentCount(); sent != 23 {
		t.Errorf("sent count %d, want 23", sent)
	}
	w := ev.addWarnings(map[string]int{"database error; retrying": 1})
	if len(w) != 3 || w[msgEventsDropped] != 7 || w[msgEventsUnreadable] != 1 {
		t.Errorf("warnings %v: want the log's, 7 events dropped and 1 line unreadable", w)
	}
}
func TestCeilingIterations(t *testing.T) {
	// Integer arithmetic: 400000 / 1000 / 2 * 3 / 4 = 150.
	for _, c := range []struct{ rows, batch, clients, want int }{
		{400000, 1000, 1, 300}, {400000, 1000, 2, 150}, {200000, 1000, 1, 150}, {1000, 1000, 1, 0},
	} {
		if got := ceilingIterations(c.rows, c.batch, c.clients); got != c.want {
			t.Errorf("ceilingIterations(%d, %d, %d) = %d, want %d", c.rows, c.batch, c.clients, got, c.want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	valid := Config{Mode: ModeBurnDown, DatabaseURL: "postgres://postgres@127.0.0.1:5432/postgres", RelayBinary: "/bin/relay", BrokerBinary: "/bin/relay-bench"}
	cases := []struct {
		field  string
		modify func(*Config)
	}{
		{"Mode", func(c *Config) { c.Mode = "sprint" }},
		{"DatabaseURL", func(c *Config) { c.DatabaseURL = "" }},
		{"Schema", func(c *Config) { c.Schema = "public" }},
		{"Schema", func(c *Config) { c.Schema = "pg_catalog" }},
		{"Schema", func(c *Config) { c.Schema = "a.b" }},
		{"Schema", func(c *Config) { c.Schema = strings.Repeat("s", 60) }},
		{"RelayBinary", func(c *Config) { c.RelayBinary = "" }},
		{"BrokerBinary", func(c *Config) { c.BrokerBinary = "" }},
		{"Relays", func(c *Config) { c.Relays = []int{1, 0} }},
		{"BatchSize", func(c *Config) { c.BatchSize = 10001 }},
		{"PollInterval", func(c *Config) { c.PollInterval = time.Microsecond }},
		{"Events", func(c *Config) { c.Events = -1 }},
		{"CeilingRows", func(c *Config) { c.CeilingRows = 100; c.BatchSize = 1000 }},
		{"CeilingClients", func(c *Config) { c.CeilingClients = []int{0} }},
		{"Retention", func(c *Config) { c.Mode = ModeSoak; c.Retention = -time.Second }},
		{"JanitorInterval", func(c *Config) { c.Mode = ModeSoak; c.JanitorInterval = time.Millisecond }},
		{"JanitorBatch", func(c *Config) { c.Mode = ModeSoak; c.JanitorBatch = 100001 }},
		{"SampleEvery", func(c *Config) { c.Mode = ModeSoak; c.SampleEvery = 10 * time.Millisecond }},
		{"SampleEvery", func(c *Config) { c.Mode = ModeSoak; c.Duration = time.Minute; c.SampleEvery = 2 * time.Minute }},
		{"Timeout", func(c *Config) { c.Mode = ModeSoak; c.Duration = time.Hour }},
		{"VacuumEvery", func(c *Config) { c.Mode = ModeSoak; c.VacuumEvery = -time.Second }},
		{"Sink", func(c *Config) { c.Sink = "carrier-pigeon" }},
		{"Brokers", func(c *Config) { c.Sink = "nats"; c.Brokers = []string{"b:9092"} }},
		{"SinkURL", func(c *Config) { c.SinkURL = "kafka://b:9092" }},
		{"SinkCeilingEvents", func(c *Config) { c.SinkCeilingEvents = -1 }},
	}
	if err := valid.withDefaults().validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	soak := valid
	soak.Mode = ModeSoak
	if d := soak.withDefaults(); d.validate() != nil || d.Rate != 500 || d.Duration != 10*time.Minute || d.Retention != 30*time.Second ||
		d.JanitorInterval != 5*time.Second || d.JanitorBatch != 1000 || d.SampleEvery != 30*time.Second || d.SampleInterval != time.Second {
		t.Fatalf("soak defaults %+v (%v): want 500/s for 10m, retention 30s, janitor 5s and 1000, a sample every 30s", d, d.validate())
	}
	args := strings.Join(relayArgs(soak.withDefaults(), "r1"), " ")
	if !strings.Contains(args, "--retention 30s --janitor-interval 5s --janitor-batch 1000") {
		t.Errorf("soak relay args %q lack the janitor's settings", args)
	}
	if !strings.Contains(args, "--sink kafka") || !strings.Contains(args, "--observe-file "+observeFD) || !strings.Contains(args, "--log-format json") {
		t.Errorf("relay args %q do not name the sink, send the events to %s and the log as JSON", args, observeFD)
	}
	if args := strings.Join(relayArgs(valid.withDefaults(), "r1"), " "); strings.Contains(args, "--retention") {
		t.Errorf("burn-down relay args %q set the retention", args)
	}
	quiet := valid
	quiet.NoNotify = true
	if args := strings.Join(relayArgs(quiet.withDefaults(), "r1"), " "); !strings.Contains(args, "--listen=false") {
		t.Errorf("relay args %q without notifications do not turn listening off", args)
	}
	for _, c := range cases {
		cfg := valid
		c.modify(&cfg)
		err := cfg.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: got %v, want a *ConfigError for %s", c.field, err, c.field)
		}
	}
}

func TestWindowIndex(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	edges := []time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)}
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{-time.Millisecond, -1}, {0, -1}, {time.Millisecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {2 * time.Second, 2}, {2*time.Second + 1, -1}} {
		if got := windowIndex(edges, t0.Add(c.at)); got != c.want {
			t.Errorf("windowIndex(%v) = %d, want %d", c.at, got, c.want)
		}
	}
}

func TestEventWindows(t *testing.T) {
	ev := newRelayEvents()
	lines := []string{
		`{"time":"2026-01-01T00:00:00.500Z","kind":"claimed","rows":3,"duration_ms":1}`,
		`{"time":"2026-01-01T00:00:01.000Z","kind":"claimed","rows":3,"duration_ms":2}`,
		`{"time":"2026-01-01T00:00:01.100Z","kind":"claimed","rows":0,"duration_ms":7}`,
		`{"time":"2026-01-01T00:00:01.200Z","kind":"janitor_ran","rows":40,"duration_ms":3}`,
		`{"time":"2026-01-01T00:00:01.700Z","kind":"janitor_ran","rows":0,"duration_ms":1}`,
		`{"time":"2026-01-01T00:00:01.900Z","kind":"claimed","rows":1,"duration_ms":3}`,
		`{"time":"2026-01-01T00:00:02.100Z","kind":"claimed","rows":1,"duration_ms":9}`,
	}
	ev.consume(strings.NewReader(strings.Join(lines, "\n")))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newEventWindows([]time.Time{t0, t0.Add(time.Second), t0.Add(2 * time.Second)})
	w.collect(ev)
	// The claim at 2.1s is after the last sample: in no window; the empty
	// one at 1.1s is a poll.
	if len(w.claimMS[1]) != 2 || w.claimMS[1][1] != 2 || len(w.claimMS[2]) != 1 || w.claimMS[2][0] != 3 {
		t.Errorf("claims by window %v, want [] [1 2] [3]", w.claimMS)
	}
	if w.retentionRuns[2] != 2 || w.retentionDeleted[2] != 40 || w.retentionRuns[1] != 0 {
		t.Errorf("retention runs %v deleting %v, want 2 runs and 40 rows in window 2", w.retentionRuns, w.retentionDeleted)
	}
}

// soakSeries returns samples every 30s from 0 to 600s, with size and dead
// tuples from the functions of the elapsed seconds, and a claim p50 of
// claim(elapsed) in each window.
func soakSeries(size, dead, claim func(float64) float64) *SoakStats {
	s := &SoakStats{SampleEveryS: 30, RetentionS: 30, JanitorIntervalS: 5}
	for e := 0.0; e <= 600; e += 30 {
		x := SoakSample{ElapsedS: e, SizeBytes: int64(size(e)), DeadTuples: int64(dead(e))}
		if e > 0 {
			c := claim(e)
			x.Claim = &Percentiles{N: 10, P50: c, P95: 2 * c, P99: 3 * c, Max: 4 * c}
		}
		s.Samples = append(s.Samples, x)
	}
	return s
}

func TestSoakJudge(t *testing.T) {
	flat := func(e float64) float64 { return 20 << 20 }
	saw := func(e float64) float64 { return float64(int(e)%60) * 1000 } // autovacuum every minute
	growing := func(e float64) float64 { return 1000 * e }
	claim := func(e float64) float64 { return 1 + e/600 } // 2x over the run
	s := soakSeries(flat, saw, claim)
	s.judge(10 * time.Minute)
	if !s.Leveled || !s.SizeLeveled || !s.DeadTuplesLeveled || s.HalfS != 300 || s.ThirdS != 210 || s.LastThirdS != 390 ||
		*s.SizeGrowthSecondHalf != 1 || s.DeadTuplesPeakMiddleThird != 30000 || s.DeadTuplesPeakLastThird != 30000 {
		t.Errorf("flat size, saw-tooth dead tuples: %+v; want leveled", *s)
	}
	// The first window starting at or after 35s is 60-90s; the last 570-600s.
	if s.WarmupS != 35 || s.ClaimFirstWindowS[0] != 60 || s.ClaimFirstWindowS[1] != 90 || s.ClaimLastWindowS[0] != 570 ||
		s.ClaimLastWindowS[1] != 600 || math.Abs(*s.ClaimP50Ratio-2/1.15) > 1e-9 || !s.ClaimWithin2x {
		t.Errorf("claim verdict %v %v %v %v: want windows 60-90 and 570-600, ratio 2/1.15", s.WarmupS, s.ClaimFirstWindowS, s.ClaimLastWindowS, *s.ClaimP50Ratio)
	}

	s = soakSeries(growing, growing, func(e float64) float64 { return 1 + e/100 })
	s.judge(10 * time.Minute)
	if s.Leveled || s.SizeLeveled || s.DeadTuplesLeveled || *s.SizeGrowthSecondHalf != 2 || s.ClaimWithin2x || *s.DeadTuplesSlopePerMin != 60000 {
		t.Errorf("growing size and dead tuples, claims 4x: %+v; want nothing leveled", *s)
	}

	s = &SoakStats{Samples: []SoakSample{{ElapsedS: 0}, {ElapsedS: 1}}}
	s.judge(time.Second)
	if s.Leveled || s.ClaimP50Ratio != nil {
		t.Errorf("two samples: %+v; want no verdict", *s)
	}
}

// The bench's defaults are the relay's: a run without flags measures the
// relay as users run it.
func TestDefaultsAreTheRelays(t *testing.T) {
	t.Parallel()
	d := relay.DefaultConfig()
	if DefaultBatchSize != d.BatchSize || DefaultPollInterval != d.PollInterval {
		t.Fatalf("bench defaults batch %d, poll %v; relay.DefaultConfig: %d, %v", DefaultBatchSize, DefaultPollInterval, d.BatchSize, d.PollInterval)
	}
}

package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
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
		`{"time":"2026-01-01T00:00:00.010Z","level":"DEBUG","msg":"batch done","claimed":10,"sent":10}`,
		`{"time":"2026-01-01T00:00:00.030Z","level":"DEBUG","msg":"batch done","claimed":10,"sent":10,"claim_ms":4.5,"publish_ms":9,"record_ms":2.25}`,
		`{"time":"2026-01-01T00:00:00.035Z","level":"DEBUG","msg":"batch done","claimed":3,"sent":3,"claim_ms":1.5}`,
		`{"time":"2026-01-01T00:00:01.000Z","level":"DEBUG","msg":"batch done","claimed":1,"sent":1}`,
		`{"time":"2026-01-01T00:00:01.000Z","level":"WARN","msg":"database error; retrying"}`,
		`panic: not JSON`,
	}
	l.consume(strings.NewReader(strings.Join(lines, "\n")))
	select {
	case <-l.started:
	default:
		t.Error("relay started not seen")
	}
	var s logStats
	s.collect(l, 10)
	if s.batches != 4 || len(s.warnings) != 1 || s.warnings["database error; retrying"] != 1 {
		t.Errorf("batches %d, warnings %v: want 4 and one database error", s.batches, s.warnings)
	}
	// Cycles only after full batches: 10 -> 30 ms and 30 -> 35 ms; the
	// wait after the partial batch of 3 is a poll, not a cycle.
	if len(s.cycleMS) != 2 || s.cycleMS[0] != 20 || s.cycleMS[1] != 5 {
		t.Errorf("cycles %v, want [20 5]", s.cycleMS)
	}
	if len(s.claimMS) != 2 || s.claimMS[0] != 4.5 || len(s.publishMS) != 1 || s.publishMS[0] != 9 || len(s.recordMS) != 1 || s.recordMS[0] != 2.25 {
		t.Errorf("claim %v, publish %v, record %v: want [4.5 1.5], [9], [2.25]", s.claimMS, s.publishMS, s.recordMS)
	}
	if !strings.Contains(l.lastLines(), "panic: not JSON") {
		t.Errorf("tail lacks the last line:\n%s", l.lastLines())
	}
}

func TestParseCeilingScript(t *testing.T) {
	out := []byte("ceiling mark_sent clients=1 events_per_s=34123\nnoise\nceiling delete_sent clients=2 events_per_s=51000\n")
	got := parseCeilingScript(out, 400000, 1000)
	if len(got) != 2 || got[0] != (CeilingResult{Lifecycle: "mark_sent", Clients: 1, Rows: 400000, Batch: 1000, EventsPerSecond: 34123}) ||
		got[1].Lifecycle != "delete_sent" || got[1].Clients != 2 || got[1].EventsPerSecond != 51000 {
		t.Errorf("parsed %+v", got)
	}
}

func TestCeilingIterations(t *testing.T) {
	// The script's integer arithmetic: 400000 / 1000 / 2 * 3 / 4 = 150.
	for _, c := range []struct{ rows, batch, clients, want int }{
		{400000, 1000, 1, 300}, {400000, 1000, 2, 150}, {200000, 1000, 1, 150}, {1000, 1000, 1, 0},
	} {
		if got := ceilingIterations(c.rows, c.batch, c.clients); got != c.want {
			t.Errorf("ceilingIterations(%d, %d, %d) = %d, want %d", c.rows, c.batch, c.clients, got, c.want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	valid := Config{Mode: ModeBurnDown, DatabaseURL: "postgres://postgres@127.0.0.1:5432/postgres", RelayBinary: "/bin/relay"}
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
		{"Relays", func(c *Config) { c.Relays = []int{1, 0} }},
		{"BatchSize", func(c *Config) { c.BatchSize = 10001 }},
		{"PollInterval", func(c *Config) { c.PollInterval = time.Microsecond }},
		{"Events", func(c *Config) { c.Events = -1 }},
		{"CeilingRows", func(c *Config) { c.CeilingRows = 100; c.BatchSize = 1000 }},
		{"CeilingClients", func(c *Config) { c.CeilingClients = []int{0} }},
	}
	if err := valid.withDefaults().validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, c := range cases {
		cfg := valid
		c.modify(&cfg)
		err := cfg.withDefaults().validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: got %v, want a *ConfigError for %s", c.field, err, c.field)
		}
	}
}

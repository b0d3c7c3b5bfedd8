package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// newConfig returns a config for mode on the test database, in a schema of
// its own that is dropped when the test ends.
func newConfig(t *testing.T, mode Mode) Config {
	t.Helper()
	_, table := testdb.NewEmpty(t) // a fresh schema name, dropped at the end
	return Config{
		Mode: mode, DatabaseURL: testdb.URL(t), Schema: table.Schema, RelayBinary: relayBin, BrokerBinary: benchBin,
		Relays: []int{1}, PollInterval: 10 * time.Millisecond, SampleInterval: 2 * time.Millisecond,
		Timeout: 2 * time.Minute, Progress: testWriter{t},
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func run(t *testing.T, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Runs) != len(cfg.Relays) {
		t.Fatalf("%d runs, want %d", len(rep.Runs), len(cfg.Relays))
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	checkJSON(t, rep)
	return rep
}

// checkJSON checks that the report encodes to JSON with the documented
// top-level and per-run fields.
func checkJSON(t *testing.T, rep *Report) {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Mode string           `json:"mode"`
		Runs []map[string]any `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("JSON does not decode: %v\n%s", err, b)
	}
	if doc.Mode != string(rep.Mode) || len(doc.Runs) != len(rep.Runs) {
		t.Fatalf("JSON mode %q with %d runs, want %q with %d", doc.Mode, len(doc.Runs), rep.Mode, len(rep.Runs))
	}
	for _, key := range []string{"relays", "events_per_s", "relay_cpu_s", "relay_peak_rss_mb", "table", "claim_ms", "duplicates", "missing"} {
		if _, ok := doc.Runs[0][key]; !ok {
			t.Errorf("JSON run lacks %q: %s", key, b)
		}
	}
}

// checkCommon checks what every run on PostgreSQL reports: the table does
// not shrink (updates leave dead tuples), and checkRelayFigures.
func checkCommon(t *testing.T, r Result) {
	t.Helper()
	if r.Table.SizeBeforeBytes <= 0 || r.Table.SizeAfterBytes < r.Table.SizeBeforeBytes {
		t.Errorf("table size %d -> %d bytes: want positive and not shrinking", r.Table.SizeBeforeBytes, r.Table.SizeAfterBytes)
	}
	checkRelayFigures(t, r)
}

// checkRelayFigures checks what every run reports of its relays.
func checkRelayFigures(t *testing.T, r Result) {
	t.Helper()
	if r.RelayCPUSeconds <= 0 || r.RelayPeakRSSMB <= 0 {
		t.Errorf("relay CPU %.3fs, peak RSS %.1f MB: want both positive", r.RelayCPUSeconds, r.RelayPeakRSSMB)
	}
	if r.RelayWarnings != 0 {
		t.Errorf("%d relay warnings: %v", r.RelayWarnings, r.RelayWarningMessages)
	}
	checkOrdered(t, "claim", r.Claim)
	checkOrdered(t, "publish", r.Publish)
	checkOrdered(t, "record", r.Record)
	checkOrdered(t, "batch cycle", r.BatchCycle)
}

// checkOrdered checks 0 < p50 <= p95 <= p99 <= max, when p is present.
func checkOrdered(t *testing.T, name string, p *Percentiles) {
	t.Helper()
	if p != nil && !(p.N > 0 && 0 < p.P50 && p.P50 <= p.P95 && p.P95 <= p.P99 && p.P99 <= p.Max) {
		t.Errorf("%s percentiles not ordered: %+v", name, *p)
	}
}

func TestBurnDown(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t, ModeBurnDown)
	cfg.Events, cfg.BatchSize, cfg.CeilingRows = 2000, 100, 4000
	rep := run(t, cfg)
	r := rep.Runs[0]
	if r.Events != 2000 || r.Sent != 2000 || r.Received != 2000 || r.Duplicates != 0 || r.Missing != 0 {
		t.Errorf("events %d, sent %d, received %d, duplicates %d, missing %d: want 2000 drained and delivered once",
			r.Events, r.Sent, r.Received, r.Duplicates, r.Missing)
	}
	if r.Seconds <= 0 || r.EventsPerSecond <= 0 || r.CeilingRatio == nil || *r.CeilingRatio <= 0 {
		t.Errorf("seconds %v, events/s %v, ceiling ratio %v: want all positive", r.Seconds, r.EventsPerSecond, r.CeilingRatio)
	}
	if r.Batches < 20 || r.BatchCycle == nil {
		t.Errorf("%d batches logged, batch cycle %v: want at least 20 and a cycle", r.Batches, r.BatchCycle)
	}
	if r.Table.DeadTuplesAfter == 0 && r.Table.Autovacuums == 0 {
		t.Errorf("no dead tuples after claiming and marking 2000 rows sent, and no autovacuum")
	}
	checkCommon(t, r)
	if st := rep.Settings; st.Sink != "kafka" || !st.EmbeddedBroker || len(st.Brokers) == 0 || runtime.GOOS == "linux" && r.BrokerCPUSeconds == nil {
		t.Errorf("settings %+v, broker CPU %v: want the kafka sink on an embedded broker in a process of its own, its CPU measured", st, r.BrokerCPUSeconds)
	}
	if c := rep.SinkCeiling; c == nil || c.Sink != "kafka" || c.Events != 2000 || c.EventsPerSecond <= 0 {
		t.Errorf("sink ceiling %+v: want 2000 kafka events at a positive rate", c)
	}
	if len(rep.Ceiling) != 4 {
		t.Fatalf("ceiling %+v: want 2 lifecycles x 2 client counts", rep.Ceiling)
	}
	for _, c := range rep.Ceiling {
		if want := ceilingIterations(4000, 100, c.Clients) * 100 * c.Clients; c.Events != want || c.EventsPerSecond <= 0 {
			t.Errorf("ceiling %+v: want %d events at a positive rate", c, want)
		}
	}
}

// The SQL ceiling runs on an outbox table made by the migrations: it is
// current for migrations.Check, has the columns, indexes and triggers of
// the table the relays get, and the ceiling's statements run on it.
func TestCeilingTableIsMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, relays := testdb.New(t)
	cfg := newConfig(t, ModeBurnDown)
	cfg.CeilingRows, cfg.BatchSize = 400, 100
	cfg = cfg.withDefaults()
	table, drop, err := ceilingTable(ctx, cfg, pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	if err := migrations.Check(ctx, pool, table); err != nil {
		t.Fatalf("the ceiling's table %s is not migrated: %v", table, err)
	}
	want, got := tableShape(t, pool, relays), tableShape(t, pool, table)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the ceiling's table:\n%s\n\nthe relays' table:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(want) < 20 || !strings.Contains(strings.Join(want, "\n"), "outbox_sent_idx") {
		t.Fatalf("the shape %v lacks columns or indexes", want)
	}

	if err := fillCeiling(ctx, pool, table, cfg.CeilingRows, cfg.PayloadBytes); err != nil {
		t.Fatal(err)
	}
	res, err := measureCeiling(ctx, cfg, table, lifecycles[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := statusCounts(ctx, pool, table)
	if err != nil {
		t.Fatal(err)
	}
	// Three quarters of 400 rows, 100 per claim: 300 claimed and marked sent.
	if res.Events != 300 || counts["sent"] != 300 || counts["pending"] != 100 {
		t.Errorf("ceiling %+v, rows %v: want 300 events, 300 sent and 100 pending", res, counts)
	}
}

// tableShape describes an outbox table without its schema's name: its
// columns, indexes and triggers, one line each, sorted.
func tableShape(t *testing.T, pool *pgxpool.Pool, table outbox.Table) []string {
	t.Helper()
	const q = `SELECT 'column ' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' ||
       coalesce(column_default, '') || ' ' || coalesce(generation_expression, '')
FROM information_schema.columns
WHERE table_schema = $1
  AND table_name = $2
UNION ALL
SELECT 'index ' || indexdef
FROM pg_indexes
WHERE schemaname = $1
  AND tablename = $2
UNION ALL
SELECT 'trigger ' || tgname || ' ' || tgenabled::text || ' ' || pg_get_triggerdef(oid)
FROM pg_trigger
WHERE tgrelid = to_regclass($3)
  AND NOT tgisinternal
ORDER BY 1`
	rows, err := pool.Query(context.Background(), q, table.Schema, table.Name, table.Ident())
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		lines[i] = strings.ReplaceAll(l, table.Schema, "<schema>")
	}
	return lines
}

func TestSteady(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t, ModeSteady)
	// Four writers, 20 ms per transaction each: enough to hold the rate
	// while the other tests (under -race) keep the host busy. Four
	// seconds, so that a stall of a second on that busy host (seen in
	// CI) does not halve the achieved rate.
	cfg.Rate, cfg.Duration, cfg.Writers, cfg.Grace = 200, 4*time.Second, 4, 10*time.Second
	r := run(t, cfg).Runs[0]
	if r.Events < 790 || r.Events > 800 || r.Missing != 0 || r.Duplicates != 0 || r.Received != r.Events || r.Sent != r.Events {
		t.Errorf("events %d, received %d, sent %d, missing %d, duplicates %d: want about 800, each delivered once",
			r.Events, r.Received, r.Sent, r.Missing, r.Duplicates)
	}
	s := r.Steady
	if s == nil || s.Latency == nil || s.Commit == nil {
		t.Fatalf("steady stats %+v: want latency and commit percentiles", s)
	}
	if s.Latency.N != r.Events {
		t.Errorf("%d latencies for %d events", s.Latency.N, r.Events)
	}
	checkOrdered(t, "latency", s.Latency)
	checkOrdered(t, "commit", s.Commit)
	// Never faster than the target; at least half of it, or, when commits
	// are too slow for that (a busy host: p50 61ms, 49/s for four writers;
	// p50 18ms but p99 248ms, 95/s), at least half of what writers that
	// never wait longer than the slowest commit make.
	allowed := float64(cfg.Writers) * 1000 / s.Commit.Max
	if least := min(100, allowed/2); r.EventsPerSecond < least || r.EventsPerSecond > 210 {
		t.Errorf("achieved %.0f events/s, target 200, at least %.0f (commit p50 %.1f ms, max %.1f ms)", r.EventsPerSecond, least, s.Commit.P50, s.Commit.Max)
	}
	if r.CeilingRatio != nil {
		t.Errorf("steady mode has a ceiling ratio %v", *r.CeilingRatio)
	}
	checkCommon(t, r)
}

// A burst on top of the steady stream is written, drained and reported:
// every burst row sent, the steady events split by when they committed.
func TestSteadyWithBurst(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t, ModeSteady)
	cfg.Rate, cfg.Duration, cfg.Writers, cfg.Grace = 200, 3*time.Second, 4, 20*time.Second
	cfg.Burst, cfg.BurstAt = 5000, time.Second
	r := run(t, cfg).Runs[0]
	if r.Missing != 0 || r.Duplicates != 0 || r.Received != r.Events {
		t.Errorf("events %d, received %d, missing %d, duplicates %d: want each steady event delivered once", r.Events, r.Received, r.Missing, r.Duplicates)
	}
	b := r.Steady.Burst
	if b == nil {
		t.Fatal("no burst reported")
	}
	// Not before BurstAt; a busy machine may take seconds to write it.
	if b.Events != 5000 || b.AtS < 0.9 || b.AtS > 15 || b.DrainS <= 0 || b.WriteS <= 0 {
		t.Errorf("burst %+v: want 5000 events committed from 1s in, drained after", b)
	}
	if b.Before == nil || b.After == nil && b.During == nil {
		t.Fatalf("burst latencies before %+v, during %+v, after %+v: want steady events before and after its commit", b.Before, b.During, b.After)
	}
	n := b.Before.N
	for _, p := range []*Percentiles{b.During, b.After} {
		if p != nil {
			n += p.N
		}
	}
	if n != r.Steady.Latency.N {
		t.Errorf("%d latencies split by the burst, %d in all", n, r.Steady.Latency.N)
	}
	if r.Sent != r.Events+5000 {
		t.Errorf("%d rows sent, want %d steady + 5000 burst", r.Sent, r.Events)
	}
}

// Without the notify trigger the relays poll: adaptively, so that the
// latency stays far below the poll interval of 2s. The test is not
// parallel: it runs before the parallel ones, whose load would stretch its
// latencies.
func TestSteadyWithoutNotify(t *testing.T) {
	cfg := newConfig(t, ModeSteady)
	cfg.Rate, cfg.Duration, cfg.Writers, cfg.Grace = 200, 2*time.Second, 4, 10*time.Second
	cfg.NoNotify, cfg.PollInterval = true, 2*time.Second
	rep := run(t, cfg)
	r := rep.Runs[0]
	if r.Missing != 0 || r.Duplicates != 0 || r.Received != r.Events || r.Events < 390 {
		t.Errorf("events %d, received %d, missing %d, duplicates %d: want about 400, each delivered once",
			r.Events, r.Received, r.Missing, r.Duplicates)
	}
	if !rep.Settings.NoNotify || r.Steady == nil || r.Steady.Latency == nil || r.Steady.Latency.P50 > 500 {
		t.Errorf("no_notify %v, steady %+v, latency %+v: want p50 well under the 2s poll interval", rep.Settings.NoNotify, r.Steady, r.Steady.Latency)
	}
	checkCommon(t, r)
}

func TestIdle(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t, ModeIdle)
	cfg.Duration, cfg.PollInterval = time.Second, 100*time.Millisecond
	r := run(t, cfg).Runs[0]
	// One claim per poll interval: about 10 a second.
	if r.Idle == nil || r.Idle.ClaimsPerSecond == nil || *r.Idle.ClaimsPerSecond < 3 || *r.Idle.ClaimsPerSecond > 20 ||
		*r.Idle.StatementsPerSecond < *r.Idle.ClaimsPerSecond || r.Idle.DBXactPerSecond <= 0 {
		t.Fatalf("idle stats %+v: want about 10 claims/s and some transactions", r.Idle)
	}
	if r.Seconds < 1 || r.Events != 0 || r.Batches != 0 {
		t.Errorf("seconds %v, events %d, batches %d: want 1s with nothing to do", r.Seconds, r.Events, r.Batches)
	}
	checkCommon(t, r)
}

// A schema the benchmark did not create is never dropped.
func TestRefusesForeignSchema(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t) // migrated by testdb, not by Run
	cfg := newConfig(t, ModeIdle)
	cfg.Schema = table.Schema
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "not created by relay-bench") {
		t.Fatalf("Run on a foreign schema: %v, want ErrForeignSchema", err)
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table.Ident()).Scan(&n); err != nil {
		t.Fatalf("the foreign table is gone: %v", err)
	}
}

// A short soak: 100 events/s for 6s with the janitor deleting rows sent
// more than 1s ago, sampled every second, and the harness vacuuming every
// 2s.
func TestSoak(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t, ModeSoak)
	cfg.Rate, cfg.Duration, cfg.Writers, cfg.Grace = 100, 6*time.Second, 2, 10*time.Second
	cfg.Retention, cfg.JanitorInterval, cfg.SampleEvery = time.Second, 500*time.Millisecond, time.Second
	cfg.VacuumEvery = 2 * time.Second
	rep := run(t, cfg)
	r := rep.Runs[0]
	if r.Events < 590 || r.Events > 600 || r.Missing != 0 || r.Duplicates != 0 || r.Received != r.Events {
		t.Errorf("events %d, received %d, missing %d, duplicates %d: want about 600, each delivered once",
			r.Events, r.Received, r.Missing, r.Duplicates)
	}
	if r.Steady == nil || r.Steady.Latency == nil || r.Steady.Latency.N != r.Events {
		t.Errorf("steady stats %+v: want a latency per event", r.Steady)
	}
	checkCommon(t, r)
	s := r.Soak
	if s == nil {
		t.Fatal("no soak stats")
	}
	// At 0, 1, ..., 5 s and once the writers stopped, at about 6 s.
	if len(s.Samples) != 7 || s.Samples[0].ElapsedS != 0 || s.Samples[6].ElapsedS < 5.9 {
		t.Fatalf("%d samples %+v: want 7, from 0 to about 6s", len(s.Samples), s.Samples)
	}
	written, claims := 0, 0
	for i, x := range s.Samples {
		if x.SizeBytes <= 0 || x.TableBytes <= 0 || x.IndexesBytes <= 0 || x.SizeBytes != x.TableBytes+x.IndexesBytes {
			t.Errorf("sample %d: size %d, table %d, indexes %d: want positive, size = table + indexes", i, x.SizeBytes, x.TableBytes, x.IndexesBytes)
		}
		if x.Pending == nil || x.Processing == nil || x.Sent == nil || x.Janitor == nil {
			t.Errorf("sample %d: pending %v, processing %v, sent %v, janitor %v: want all read", i, x.Pending, x.Processing, x.Sent, x.Janitor)
		}
		if i > 0 && x.Janitor != nil && s.Samples[i-1].Janitor != nil && x.Janitor.TotalDeleted < s.Samples[i-1].Janitor.TotalDeleted {
			t.Errorf("sample %d: total_deleted went down from %d to %d", i, s.Samples[i-1].Janitor.TotalDeleted, x.Janitor.TotalDeleted)
		}
		written += x.Written
		if x.Claim != nil {
			claims++
			checkOrdered(t, "window claim", x.Claim)
		}
		checkOrdered(t, "window latency", x.Latency)
	}
	if written != r.Events {
		t.Errorf("the windows hold %d writes, the run %d", written, r.Events)
	}
	if claims < 5 {
		t.Errorf("%d windows with claims logged, want at least 5 of 6", claims)
	}
	last := s.Samples[len(s.Samples)-1]
	if last.Janitor == nil || last.Janitor.TotalDeleted <= 0 || last.Janitor.LockedBy == nil {
		t.Fatalf("janitor job at the end %+v: want deletions by a relay", last.Janitor)
	}
	runs := 0
	for _, x := range s.Samples {
		runs += x.JanitorRuns
	}
	if runs < 2 {
		t.Errorf("%d retention runs logged in 6s at a 500ms interval", runs)
	}
	// The VACUUM before the relays start, and those at 2s and 4s (the one
	// at 6s may be cut short by the end).
	if last.Vacuums < 3 || s.Vacuum == nil || s.Vacuum.N < 2 || s.VacuumEveryS != 2 {
		t.Errorf("vacuum_count %d at the end, harness vacuums %+v: want the harness's", last.Vacuums, s.Vacuum)
	}
	if r.Sent >= r.Events {
		t.Errorf("%d sent rows left of %d events: the janitor deleted none", r.Sent, r.Events)
	}
	if math.Abs(s.HalfS-3) > 0.5 || s.SizeGrowthSecondHalf == nil || s.ClaimP50Ratio == nil ||
		s.WarmupS != 1.5 || s.ClaimFirstWindowS[0] < 1.5 || s.ClaimLastWindowS[1] != last.ElapsedS {
		t.Errorf("verdicts %+v: want the half-way sample at 3s, a size growth, claim windows from 2s to the end", *s)
	}
	// The soak's JSON decodes to the documented fields.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Settings map[string]any `json:"settings"`
		Runs     []struct {
			Soak struct {
				Samples []struct {
					ElapsedS  *float64       `json:"elapsed_s"`
					SizeBytes *int64         `json:"size_bytes"`
					Dead      *int64         `json:"dead_tuples"`
					Janitor   map[string]any `json:"janitor"`
					Claim     map[string]any `json:"claim_ms"`
					Latency   map[string]any `json:"latency_ms"`
				} `json:"samples"`
				Leveled       *bool    `json:"leveled"`
				ClaimWithin2x *bool    `json:"claim_within_2x"`
				SizeGrowth    *float64 `json:"size_growth_second_half"`
			} `json:"soak"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("JSON does not decode: %v", err)
	}
	js := doc.Runs[0].Soak
	if len(js.Samples) != len(s.Samples) || js.Leveled == nil || js.ClaimWithin2x == nil || js.SizeGrowth == nil ||
		doc.Settings["retention_s"] != 1.0 || doc.Settings["sample_every_s"] != 1.0 {
		t.Fatalf("soak JSON lacks fields: %s", b)
	}
	for i, x := range js.Samples {
		if x.ElapsedS == nil || x.SizeBytes == nil || x.Dead == nil || x.Janitor["total_deleted"] == nil {
			t.Errorf("JSON sample %d lacks fields: %s", i, b)
		}
	}
	if js.Samples[len(js.Samples)-1].Claim["p99"] == nil || js.Samples[len(js.Samples)-1].Latency["p50"] == nil {
		t.Errorf("JSON's last sample lacks window percentiles: %s", b)
	}
}

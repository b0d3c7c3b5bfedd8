package main

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// fairnessRun is one drain of table a's backlog by relay run --tables a,b,
// with or without events written to b meanwhile.
type fairnessRun struct {
	aRows    int
	aDrain   time.Duration   // from the relay's start to a's last sent_at, database clock
	bLatency []time.Duration // each b event's sent_at - created_at, sorted
	bLastAt  time.Time       // b's last sent_at
	aLastAt  time.Time       // a's last sent_at
	cpu      time.Duration   // user + system CPU of this process (relay and broker) during the drain
	hostBusy float64         // share of the host's CPU time busy during the drain (every process)
}

// rate is a's drain rate in rows/s.
func (f fairnessRun) rate() float64 { return float64(f.aRows) / f.aDrain.Seconds() }

// pct returns the q-th quantile of b's latencies.
func (f fairnessRun) pct(q float64) time.Duration {
	if len(f.bLatency) == 0 {
		return 0
	}
	return f.bLatency[min(len(f.bLatency)-1, int(q*float64(len(f.bLatency))))]
}

// measureFairness loads table a with aRows events of 200 bytes, starts
// relay run --tables a,b with the default settings and a Kafka-protocol
// broker, and times a's drain; with bEvery > 0 it meanwhile writes one
// event to b every bEvery, each in its own transaction, until a has no row
// left to claim, and at most bMax of them (0: no limit). With aRows 0 it
// writes bMax events to b: b's latency with nothing else to do.
func measureFairness(t testing.TB, aRows int, bEvery time.Duration, bMax int) fairnessRun {
	t.Helper()
	pool, schema := tablesSetup(t, "a", "b")
	ctx := context.Background()
	a, b := outbox.Table{Schema: schema, Name: "a"}, outbox.Table{Schema: schema, Name: "b"}
	if _, err := pool.Exec(ctx, "INSERT INTO "+a.Ident()+" (topic, payload) "+
		"SELECT 'fair.a', convert_to(repeat('x', 200), 'UTF8') FROM generate_series(1, $1)", aRows); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+a.Ident()); err != nil {
		t.Fatal(err)
	}
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"fair.a", "fair.b"}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()

	var start time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&start); err != nil {
		t.Fatal(err)
	}
	cpu0, host0 := processCPU(), hostCPU()
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": schema, "OUTBOX_KAFKA_BROKERS": strings.Join(br.Addrs(), ",")}
	stderr, stop := startRun(t, env, "--tables", "a,b", "--log-level", "warn")

	// b's writer: once a's drain is under way, one event per transaction,
	// paced, until a is drained.
	var drained atomic.Bool
	draining, written := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		defer func() { written <- n }()
		if bEvery <= 0 {
			return
		}
		<-draining
		tick := time.NewTicker(bEvery)
		defer tick.Stop()
		for (aRows == 0 || !drained.Load()) && (bMax == 0 || n < bMax) {
			if _, err := pool.Exec(ctx, "INSERT INTO "+b.Ident()+" (topic, payload) VALUES ('fair.b', convert_to(repeat('y', 200), 'UTF8'))"); err != nil {
				t.Error(err)
				return
			}
			n++
			<-tick.C
		}
	}()
	deadline := time.Now().Add(10 * time.Minute)
	for started := false; ; {
		var left, sent bool
		if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+a.Ident()+" WHERE status IN ('pending', 'processing')), "+
			"EXISTS (SELECT 1 FROM "+a.Ident()+" WHERE status = 'sent')").Scan(&left, &sent); err != nil {
			t.Fatal(err)
		}
		if sent && !started {
			started = true
			close(draining)
		}
		if !left {
			if !started {
				close(draining)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("table a not drained after 10 minutes\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the table: nothing to await
	}
	drained.Store(true)
	nb := <-written
	testdb.AwaitSent(t, pool, b, nb, time.Minute)
	run := fairnessRun{aRows: aRows, cpu: processCPU() - cpu0, hostBusy: host0.busySince()}
	if code := stop(); code != 0 {
		t.Fatalf("relay run exited %d\n%s", code, stderr.String())
	}
	var sent int
	if err := pool.QueryRow(ctx, "SELECT count(*), coalesce(max(sent_at), now()) FROM "+a.Ident()+" WHERE status = 'sent'").Scan(&sent, &run.aLastAt); err != nil {
		t.Fatal(err)
	}
	if sent != aRows {
		t.Fatalf("table a: %d of %d rows sent", sent, aRows)
	}
	if aRows == 0 {
		run.aLastAt = start
	}
	run.aDrain = run.aLastAt.Sub(start)
	rows, err := pool.Query(ctx, "SELECT sent_at, sent_at - created_at FROM "+b.Ident()+" WHERE status = 'sent'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var at time.Time
		var lat time.Duration
		if err := rows.Scan(&at, &lat); err != nil {
			t.Fatal(err)
		}
		run.bLatency = append(run.bLatency, lat)
		if at.After(run.bLastAt) {
			run.bLastAt = at
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(run.bLatency)
	// Drop the drained tables now, not when the benchmark ends: their
	// autovacuum would run during the next measurement.
	if _, err := pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	return run
}

// cpuTimes are the host's busy and total CPU ticks from /proc/stat (zero
// where it cannot be read).
type cpuTimes struct{ busy, total uint64 }

func hostCPU() cpuTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(data), "\n")
	var c cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		n, _ := strconv.ParseUint(f, 10, 64)
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c
}

// busySince is the share of the host's CPU time busy since c was read.
func (c cpuTimes) busySince() float64 {
	now := hostCPU()
	if now.total <= c.total {
		return 0
	}
	return float64(now.busy-c.busy) / float64(now.total-c.total)
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// While table a drains a backlog of 200,000 rows, table b's events, written
// one by one, are published long before the backlog is gone: each within a
// quarter of a's drain time (measured: milliseconds, see
// docs/benchmarks.md#several-tables-one-relay), where waiting behind a's
// backlog would take all of it.
func TestRunTablesFair(t *testing.T) {
	t.Parallel()
	const aRows, bEvents = 200_000, 40
	f := measureFairness(t, aRows, 20*time.Millisecond, bEvents)
	t.Logf("a: %d rows in %v (%.0f/s); b: %d events, p50 %v, p99 %v, max %v",
		f.aRows, f.aDrain.Round(time.Millisecond), f.rate(), len(f.bLatency), f.pct(0.5), f.pct(0.99), f.pct(1))
	if len(f.bLatency) != bEvents {
		t.Fatalf("%d of b's events were written while a drained, want %d: a drained too fast for the test to mean anything; raise aRows", len(f.bLatency), bEvents)
	}
	if !f.bLastAt.Before(f.aLastAt) {
		t.Fatalf("b's last event was sent at %v, after a's backlog was gone (%v): the test did not overlap them", f.bLastAt, f.aLastAt)
	}
	if bound := f.aDrain / 4; f.pct(1) >= bound {
		t.Errorf("b's slowest event took %v to publish, over a quarter of a's drain time (%v): b waited for a's backlog", f.pct(1), f.aDrain)
	}
}

// BenchmarkTablesFairness measures, in OUTBOX_FAIRNESS_PAIRS interleaved
// pairs (default 3, in ABBA order), table a's drain of OUTBOX_FAIRNESS_ROWS rows (default
// 1,000,000) alone and while table b receives 100 events/s, b's
// commit-to-publish latency meanwhile, and b's latency with a empty; it logs each pair and reports the
// medians. Run it with -benchtime 1x:
//
//	go test ./cmd/relay -run '^$' -bench BenchmarkTablesFairness -benchtime 1x -timeout 60m -v
func BenchmarkTablesFairness(b *testing.B) {
	rows, pairs := envInt(b, "OUTBOX_FAIRNESS_ROWS", 1_000_000), envInt(b, "OUTBOX_FAIRNESS_PAIRS", 3)
	for range b.N {
		var ratio, aloneRate, withRate, p50, p99, pmax, idle50, idle99 []float64
		for i := range pairs {
			// ABBA order: neither kind always runs first.
			var alone, with fairnessRun
			if i%2 == 0 {
				alone = measureFairness(b, rows, 0, 0)
				with = measureFairness(b, rows, 10*time.Millisecond, 0)
			} else {
				with = measureFairness(b, rows, 10*time.Millisecond, 0)
				alone = measureFairness(b, rows, 0, 0)
			}
			b.Logf("pair %d: a alone: %d rows in %v = %.0f/s, CPU %v (%.1f us/row), host CPU %.0f%% busy", i+1, rows, alone.aDrain.Round(time.Millisecond), alone.rate(),
				alone.cpu.Round(time.Millisecond), float64(alone.cpu.Microseconds())/float64(rows), 100*alone.hostBusy)
			b.Logf("pair %d: a with b: %d rows in %v = %.0f/s (%.3fx alone), CPU %v (%.1f us/row), host CPU %.0f%% busy; b: %d events, p50 %v, p99 %v, max %v",
				i+1, rows, with.aDrain.Round(time.Millisecond), with.rate(), with.rate()/alone.rate(), with.cpu.Round(time.Millisecond),
				float64(with.cpu.Microseconds())/float64(rows), 100*with.hostBusy, len(with.bLatency), with.pct(0.5), with.pct(0.99), with.pct(1))
			idle := measureFairness(b, 0, 10*time.Millisecond, 1000)
			b.Logf("pair %d: b alone, a empty: %d events, p50 %v, p99 %v, max %v", i+1, len(idle.bLatency), idle.pct(0.5), idle.pct(0.99), idle.pct(1))
			idle50, idle99 = append(idle50, float64(idle.pct(0.5).Microseconds())/1000), append(idle99, float64(idle.pct(0.99).Microseconds())/1000)
			ratio, aloneRate, withRate = append(ratio, with.rate()/alone.rate()), append(aloneRate, alone.rate()), append(withRate, with.rate())
			p50 = append(p50, float64(with.pct(0.5).Microseconds())/1000)
			p99 = append(p99, float64(with.pct(0.99).Microseconds())/1000)
			pmax = append(pmax, float64(with.pct(1).Microseconds())/1000)
		}
		b.ReportMetric(median(aloneRate), "a_alone_rows/s")
		b.ReportMetric(median(withRate), "a_with_b_rows/s")
		b.ReportMetric(median(ratio), "with/alone")
		b.ReportMetric(median(p50), "b_p50_ms")
		b.ReportMetric(median(p99), "b_p99_ms")
		b.ReportMetric(median(pmax), "b_max_ms")
		b.ReportMetric(median(idle50), "b_idle_p50_ms")
		b.ReportMetric(median(idle99), "b_idle_p99_ms")
	}
}

// envInt reads a positive whole number from the environment variable
// name, or returns def when it is unset.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive whole number", name, s)
	}
	return n
}

// median returns the median of v (the mean of the middle two when even).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

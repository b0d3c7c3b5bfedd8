package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape returns every sample of a /metrics page by series,
// `name{label="value",...}` with the labels sorted; histograms give
// name_count and name_sum.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	status, body := get(t, addr, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(labels)
			key := func(n string) string {
				if len(labels) == 0 {
					return n
				}
				return n + "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[key(name)] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key(name)] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[key(name+"_count")] = float64(m.GetHistogram().GetSampleCount())
				out[key(name+"_sum")] = m.GetHistogram().GetSampleSum()
			case m.GetUntyped() != nil:
				out[key(name)] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

// get asks addr for path and returns the status and body.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metricsAddr waits for relay run's JSON log line giving the bound
// address of --metrics-addr.
func metricsAddr(t *testing.T, stderr *syncbuf.Buffer) string {
	t.Helper()
	var addr string
	await(t, 10*time.Second, func() bool {
		for _, line := range strings.Split(stderr.String(), "\n") {
			var l struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving metrics and health checks" {
				addr = l.Address
				return true
			}
		}
		return false
	})
	return addr
}

// relay run --metrics-addr: the counters move with the events sent, by
// topic and sink; the backlog gauges show a row held back and its age,
// and fall to 0 once it is sent; /healthz answers 200 throughout;
// /readyz answers 200 when ready, and 503 naming the check when the
// database is unreachable or the schema is not current.
func TestRunServesMetricsAndHealth(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	dbURL, err := url.Parse(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(dbURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	dbURL.Host = proxy.Addr()

	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	// One event the relay cannot claim yet: a transaction holds its row
	// lock, and claims skip locked rows.
	held, err := w.Write(ctx, pool, outbox.Message{Topic: "m.held", Payload: []byte("held")})
	if err != nil {
		t.Fatal(err)
	}
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx) //nolint:errcheck // released below
	if _, err := lock.Exec(ctx, "SELECT 1 FROM "+table.Ident()+" WHERE id = $1 FOR UPDATE", held.ID); err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := range 30 {
		topic := "m.a"
		if i%3 == 0 {
			topic = "m.b"
		}
		msgs = append(msgs, outbox.Message{Topic: topic, Payload: fmt.Appendf(nil, "event %d", i)})
	}
	if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{"OUTBOX_DATABASE_URL": dbURL.String(), "OUTBOX_SCHEMA": table.Schema}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "stdout", "--poll-interval", "20ms", "--log-format", "json",
			"--metrics-addr", "127.0.0.1:0", "--metrics-backlog-interval", "50ms", "--outage-backoff-max", "200ms"},
			func(k string) string { return env[k] }, &stdout, &stderr)
	}()
	addr := metricsAddr(t, &stderr)
	if !regexp.MustCompile(`^127\.0\.0\.1:[1-9][0-9]*$`).MatchString(addr) {
		t.Fatalf("bound address %q: want 127.0.0.1 and the port chosen", addr)
	}

	// The 30 events are sent and counted by topic, by the relay and by
	// the sink; the held one waits, due, and its age grows. The backlog
	// gauges are sampled on their own interval, so the wait also covers a
	// sample taken after the 30 were marked sent (processing back to 0).
	var m map[string]float64
	await(t, 20*time.Second, func() bool {
		m = scrape(t, addr)
		processing, ok := m[`outbox_backlog_rows{state="processing",table="`+table.String()+`"}`]
		return m[`outbox_events_total{outcome="sent",topic="m.a"}`] == 20 && m[`outbox_events_total{outcome="sent",topic="m.b"}`] == 10 &&
			ok && processing == 0 &&
			m[`outbox_backlog_rows{state="pending_due",table="`+table.String()+`"}`] == 1 && m[`outbox_oldest_due_age_seconds{table="`+table.String()+`"}`] > 0.2
	})
	want := map[string]float64{
		`outbox_events_total{outcome="claimed",topic="m.a"}`:                           20,
		`outbox_events_total{outcome="failed",topic="m.a"}`:                            0,
		`outbox_sink_messages_total{result="acknowledged",sink="stdout",topic="m.a"}`:  20,
		`outbox_sink_messages_total{result="acknowledged",sink="stdout",topic="m.b"}`:  10,
		`outbox_event_age_at_publish_seconds_count{sink="stdout"}`:                     30,
		`outbox_sink_outage{sink="stdout"}`:                                            0,
		`outbox_backlog_rows{state="processing",table="` + table.String() + `"}`:       0,
		`outbox_backlog_rows{state="failed",table="` + table.String() + `"}`:           0,
		`outbox_backlog_estimated{state="pending_due",table="` + table.String() + `"}`: 0,
		`outbox_relay_sink_outage`:                                                     0,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{`outbox_publish_duration_seconds_count{sink="stdout"}`, `outbox_publish_batch_size_count{sink="stdout"}`,
		`outbox_claim_duration_seconds_count{claim="lease"}`, `go_goroutines`, `process_cpu_seconds_total`} {
		if m[k] <= 0 {
			t.Errorf("%s = %v, want > 0", k, m[k])
		}
	}
	if m[`outbox_publish_batch_size_sum{sink="stdout"}`] != 30 {
		t.Errorf("batch sizes add up to %v, want 30", m[`outbox_publish_batch_size_sum{sink="stdout"}`])
	}
	if !strings.Contains(strings.Join(keys(m), "\n"), `outbox_build_info{version=`) {
		t.Error("no outbox_build_info")
	}
	if status, body := get(t, addr, "/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", status, body)
	}
	awaitReadyz(t, addr, func(status int, body string) bool {
		return status == http.StatusOK && strings.Contains(body, "database: ok") && strings.Contains(body, "schema: ok")
	})

	// Released, the held event goes: nothing is due any more.
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, 20*time.Second, func() bool {
		m = scrape(t, addr)
		return m[`outbox_events_total{outcome="sent",topic="m.held"}`] == 1 && m[`outbox_backlog_rows{state="pending_due",table="`+table.String()+`"}`] == 0 &&
			m[`outbox_oldest_due_age_seconds{table="`+table.String()+`"}`] == 0
	})

	// The database unreachable: not ready, naming it; alive all the same.
	proxy.Cut()
	var body string
	await(t, 10*time.Second, func() bool {
		var status int
		status, body = get(t, addr, "/readyz")
		return status == http.StatusServiceUnavailable
	})
	if !regexp.MustCompile(`(?m)^database: .+`).MatchString(body) || strings.Contains(body, "database: ok") {
		t.Errorf("/readyz with the database cut does not name it:\n%s", body)
	}
	if status, _ := get(t, addr, "/healthz"); status != http.StatusOK {
		t.Errorf("/healthz with the database cut: %d, want 200", status)
	}
	proxy.Heal()
	await(t, 10*time.Second, func() bool {
		status, _ := get(t, addr, "/readyz")
		return status == http.StatusOK
	})

	// The schema one migration behind: not ready, naming the schema (once
	// the cached answer of the database checks, at most 1s old, is
	// renewed).
	if _, _, err := migrations.Down(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	awaitReadyz(t, addr, func(status int, body string) bool {
		return status == http.StatusServiceUnavailable && strings.Contains(body, "schema: ") && !strings.Contains(body, "schema: ok") && strings.Contains(body, "database: ok")
	})
	if _, err := migrations.Up(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	awaitReadyz(t, addr, func(status int, _ string) bool { return status == http.StatusOK })

	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run: exit %d\n%s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "hunter2") {
		t.Error("a secret reached the log")
	}
}

// relay healthcheck exits 0 on 200 and 1 on anything else or no answer,
// printing the answer; :PORT asks the loopback interface; bad flags exit
// 2 naming the flag.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.Error(w, "database: connection refused", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := strings.Cut(addr, ":")

	code, out, stderr := invoke(context.Background(), nil, "healthcheck", "--addr", addr, "--path", "/healthz")
	if code != 0 || !strings.Contains(out, "200 OK") || !strings.Contains(out, "ok") {
		t.Errorf("/healthz: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = invoke(context.Background(), map[string]string{"OUTBOX_ADDR": ":" + port}, "healthcheck")
	if code != 1 || !strings.Contains(out, "503") || !strings.Contains(out, "connection refused") || !strings.Contains(stderr, "503") {
		t.Errorf("/readyz (the default) on :PORT: exit %d, want 1\n%s%s", code, out, stderr)
	}
	srv.Close()
	if code, _, stderr = invoke(context.Background(), nil, "healthcheck", "--addr", addr, "--timeout", "500ms"); code != 1 {
		t.Errorf("nothing listening: exit %d, want 1\n%s", code, stderr)
	}
	code, _, stderr = invoke(context.Background(), nil, "healthcheck", "--addr", "nonsense", "--path", "readyz", "--timeout", "0s")
	for _, flag := range []string{"--addr (OUTBOX_ADDR)", "--path (OUTBOX_PATH)", "--timeout (OUTBOX_TIMEOUT)"} {
		if code != 2 || !strings.Contains(stderr, flag) {
			t.Errorf("bad flags: exit %d, want 2 naming %s\n%s", code, flag, stderr)
		}
	}
}

// Bad metrics flags are usage errors naming the flag.
func TestMetricsFlagsInvalid(t *testing.T) {
	t.Parallel()
	code, _, stderr := invoke(context.Background(), nil, "run", "--database-url", "postgres://x@127.0.0.1:1/x", "--sink", "stdout",
		"--metrics-addr", "9090", "--metrics-backlog-interval", "0s", "--metrics-backlog-limit", "-1", "--metrics-max-topics", "0")
	for _, flag := range []string{"--metrics-addr (OUTBOX_METRICS_ADDR)", "--metrics-backlog-interval (OUTBOX_METRICS_BACKLOG_INTERVAL)", "--metrics-backlog-limit (OUTBOX_METRICS_BACKLOG_LIMIT)",
		"--metrics-max-topics (OUTBOX_METRICS_MAX_TOPICS)"} {
		if code != 2 || !strings.Contains(stderr, flag) {
			t.Errorf("exit %d, want 2 naming %s\n%s", code, flag, stderr)
		}
	}
}

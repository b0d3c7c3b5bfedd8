package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/bench"
)

// benchInvoke runs `relay bench args...` with env as the environment.
func benchInvoke(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = run(context.Background(), append([]string{"bench"}, args...), func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Bad bench flags exit 2 naming the flag, before touching a database.
func TestBenchBadFlagsExit2NamingTheFlag(t *testing.T) {
	t.Parallel()
	url := "postgres://u:hunter2@127.0.0.1:1/postgres"
	my := "mysql://u:hunter2@127.0.0.1:1/test"
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no mode", nil, nil, "bench needs a mode"},
		{"unknown mode", nil, []string{"sprint"}, `unknown bench mode "sprint"`},
		{"zero events", nil, []string{"burn-down", "--events", "0"}, "--events (OUTBOX_EVENTS)"},
		{"events from env", map[string]string{"OUTBOX_EVENTS": "many"}, []string{"burn-down"}, "--events from OUTBOX_EVENTS"},
		{"bad relay list", nil, []string{"burn-down", "--relays", "1,x"}, "--relays (OUTBOX_RELAYS)"},
		{"empty relay list", nil, []string{"idle", "--relays", ","}, "--relays (OUTBOX_RELAYS)"},
		{"bad ceiling clients", nil, []string{"burn-down", "--ceiling-clients", "0"}, "--ceiling-clients (OUTBOX_CEILING_CLIENTS)"},
		{"negative duration", nil, []string{"idle", "--duration", "-1s"}, "--duration (OUTBOX_DURATION)"},
		{"zero rate", nil, []string{"steady", "--rate", "0"}, "--rate (OUTBOX_RATE)"},
		{"flag of another mode", nil, []string{"burn-down", "--rate", "5"}, "-rate"},
		{"public schema", nil, []string{"idle", "--database-url", url, "--schema", "public"}, "--schema (OUTBOX_SCHEMA)"},
		{"batch too large", nil, []string{"burn-down", "--database-url", url, "--batch-size", "20000"}, "--batch-size (OUTBOX_BATCH_SIZE)"},
		{"too few ceiling rows", nil, []string{"burn-down", "--database-url", url, "--batch-size", "1000", "--ceiling-rows", "1000"}, "--ceiling-rows (OUTBOX_CEILING_ROWS)"},
		{"bad database url", nil, []string{"idle", "--database-url", "postgres://u:hunter2@[::1"}, "--database-url (OUTBOX_DATABASE_URL)"},
		{"negative sample interval", nil, []string{"idle", "--sample-interval", "-1ms"}, "--sample-interval (OUTBOX_SAMPLE_INTERVAL)"},
		{"zero retention", nil, []string{"soak", "--retention", "0s"}, "--retention (OUTBOX_RETENTION)"},
		{"zero janitor batch", nil, []string{"soak", "--janitor-batch", "0"}, "--janitor-batch (OUTBOX_JANITOR_BATCH)"},
		{"janitor interval too short", nil, []string{"soak", "--database-url", url, "--janitor-interval", "1ms"}, "--janitor-interval (OUTBOX_JANITOR_INTERVAL)"},
		{"sample every too short", nil, []string{"soak", "--database-url", url, "--sample-every", "1ms"}, "--sample-every (OUTBOX_SAMPLE_EVERY)"},
		{"sample every beyond the duration", nil, []string{"soak", "--database-url", url, "--duration", "10s", "--sample-every", "20s"}, "--sample-every (OUTBOX_SAMPLE_EVERY)"},
		{"soak longer than the timeout", nil, []string{"soak", "--database-url", url, "--duration", "40m"}, "--timeout (OUTBOX_TIMEOUT)"},
		{"soak flag in steady", nil, []string{"steady", "--retention", "1s"}, "-retention"},
		{"negative vacuum every", nil, []string{"soak", "--vacuum-every", "-1s"}, "--vacuum-every (OUTBOX_VACUUM_EVERY)"},
		{"unknown sink", nil, []string{"steady", "--database-url", url, "--sink", "pigeon"}, "--sink (OUTBOX_SINK)"},
		{"sink url with kafka", nil, []string{"steady", "--database-url", url, "--sink-url", "nats://b:4222"}, "--sink-url (OUTBOX_SINK_URL): the kafka sink has no --kafka-url"},
		{"kafka brokers with another sink", nil, []string{"steady", "--database-url", url, "--sink", "nats", "--kafka-brokers", "b:9092"}, "--kafka-brokers (OUTBOX_KAFKA_BROKERS)"},
		{"negative sink ceiling events", nil, []string{"burn-down", "--sink-ceiling-events", "-1"}, "--sink-ceiling-events (OUTBOX_SINK_CEILING_EVENTS)"},
		{"steady on mysql", nil, []string{"steady", "--database-url", my}, "--database-url (OUTBOX_DATABASE_URL): a mysql:// URL works in burn-down mode only"},
		{"notify off on mysql", nil, []string{"burn-down", "--database-url", my, "--notify=false"}, "--notify (OUTBOX_NOTIFY)"},
		{"hold snapshot on mysql", nil, []string{"burn-down", "--database-url", my, "--hold-snapshot"}, "--hold-snapshot (OUTBOX_HOLD_SNAPSHOT)"},
		{"mysql schema is the URL's database", nil, []string{"burn-down", "--database-url", my, "--schema", "test"}, "--schema (OUTBOX_SCHEMA)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := benchInvoke(c.env, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Fatalf("stderr does not mention %q:\n%s", c.want, stderr)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Fatalf("stderr shows the password:\n%s", stderr)
			}
		})
	}
}

func TestBenchHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"steady", "--help"}, {"soak", "--help"}} {
		code, stdout, stderr := benchInvoke(nil, args...)
		if code != 0 || !strings.Contains(stdout+stderr, "burn-down|steady|idle|soak") {
			t.Errorf("relay bench %v: exit %d, output:\n%s%s", args, code, stdout, stderr)
		}
	}
}

// soak's flags reach bench.Config, with the soak's defaults.
func TestBenchSoakConfig(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) benchFlags {
		t.Helper()
		f := newFlags("relay bench soak", benchUsage, io.Discard, func(string) string { return "" })
		var bf benchFlags
		bf.register(f, bench.ModeSoak)
		if err := f.parse(args); err != nil {
			t.Fatal(err)
		}
		return bf
	}
	bf := parse()
	cfg, err := bf.config(bench.ModeSoak)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rate != 500 || cfg.Duration != 10*time.Minute || cfg.Retention != 30*time.Second || cfg.JanitorInterval != 5*time.Second ||
		cfg.JanitorBatch != 1000 || cfg.SampleEvery != 30*time.Second || cfg.SampleInterval != time.Second {
		t.Errorf("soak defaults: %+v", cfg)
	}
	bf = parse("--rate", "100", "--duration", "6s", "--retention", "1s", "--janitor-interval", "500ms", "--janitor-batch", "50", "--sample-every", "1s", "--vacuum-every", "2s")
	if cfg, err = bf.config(bench.ModeSoak); err != nil {
		t.Fatal(err)
	}
	if cfg.Rate != 100 || cfg.Duration != 6*time.Second || cfg.Retention != time.Second || cfg.JanitorInterval != 500*time.Millisecond ||
		cfg.JanitorBatch != 50 || cfg.SampleEvery != time.Second || cfg.VacuumEvery != 2*time.Second {
		t.Errorf("soak flags: %+v", cfg)
	}
}

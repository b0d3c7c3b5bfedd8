package main

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/bench"
)

// invoke runs `relay-bench args...`.
func invoke(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Bad flags exit 2 naming the flag, before touching a database or
// building the relay.
func TestBadFlagsExit2NamingTheFlag(t *testing.T) {
	t.Parallel()
	url := "postgres://u:hunter2@127.0.0.1:1/postgres"
	my := "mysql://u:hunter2@127.0.0.1:1/test"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no mode", nil, "a mode is needed"},
		{"unknown mode", []string{"sprint"}, `unknown mode "sprint"`},
		{"zero events", []string{"burn-down", "--events", "0"}, "invalid value for --events: must be positive"},
		{"events not a number", []string{"burn-down", "--events", "many"}, `invalid value "many" for --events`},
		{"missing value", []string{"burn-down", "--events"}, "flag needs an argument: --events"},
		{"bad relay list", []string{"burn-down", "--relays", "1,x"}, "--relays"},
		{"empty relay list", []string{"idle", "--relays", ","}, "--relays"},
		{"bad ceiling clients", []string{"burn-down", "--ceiling-clients", "0"}, "--ceiling-clients"},
		{"negative duration", []string{"idle", "--duration", "-1s"}, "--duration"},
		{"zero rate", []string{"steady", "--rate", "0"}, "--rate"},
		{"flag of another mode", []string{"burn-down", "--rate", "5"}, `flag provided but not defined: --rate; run "relay-bench burn-down --help"`},
		{"stray argument", []string{"idle", "extra"}, `unexpected arguments ["extra"]`},
		{"missing relay binary", []string{"idle", "--relay-bin", "/nonexistent/relay"}, "--relay-bin"},
		{"public schema", []string{"idle", "--database-url", url, "--schema", "public"}, "--schema"},
		{"batch too large", []string{"burn-down", "--database-url", url, "--batch-size", "20000"}, "--batch-size"},
		{"too few ceiling rows", []string{"burn-down", "--database-url", url, "--batch-size", "1000", "--ceiling-rows", "1000"}, "--ceiling-rows"},
		{"bad database url", []string{"idle", "--database-url", "postgres://u:hunter2@[::1"}, "--database-url"},
		{"negative sample interval", []string{"idle", "--sample-interval", "-1ms"}, "--sample-interval"},
		{"zero retention", []string{"soak", "--retention", "0s"}, "--retention"},
		{"zero janitor batch", []string{"soak", "--janitor-batch", "0"}, "--janitor-batch"},
		{"janitor interval too short", []string{"soak", "--database-url", url, "--janitor-interval", "1ms"}, "--janitor-interval"},
		{"sample every too short", []string{"soak", "--database-url", url, "--sample-every", "1ms"}, "--sample-every"},
		{"sample every beyond the duration", []string{"soak", "--database-url", url, "--duration", "10s", "--sample-every", "20s"}, "--sample-every"},
		{"soak longer than the timeout", []string{"soak", "--database-url", url, "--duration", "40m"}, "--timeout"},
		{"soak flag in steady", []string{"steady", "--retention", "1s"}, "--retention"},
		{"negative vacuum every", []string{"soak", "--vacuum-every", "-1s"}, "--vacuum-every"},
		{"unknown sink", []string{"steady", "--database-url", url, "--sink", "pigeon"}, "--sink"},
		{"sink url with kafka", []string{"steady", "--database-url", url, "--sink-url", "nats://b:4222"}, "--sink-url: the kafka sink has no --kafka-url"},
		{"kafka brokers with another sink", []string{"steady", "--database-url", url, "--sink", "nats", "--kafka-brokers", "b:9092"}, "--kafka-brokers"},
		{"negative sink ceiling events", []string{"burn-down", "--sink-ceiling-events", "-1"}, "--sink-ceiling-events"},
		{"steady on mysql", []string{"steady", "--database-url", my}, "--database-url: a mysql:// URL works in burn-down mode only"},
		{"notify off on mysql", []string{"burn-down", "--database-url", my, "--notify=false"}, "--notify"},
		{"hold snapshot on mysql", []string{"burn-down", "--database-url", my, "--hold-snapshot"}, "--hold-snapshot"},
		{"mysql schema is the URL's database", []string{"burn-down", "--database-url", my, "--schema", "test"}, "--schema"},
		{"pprof not loopback", []string{"steady", "--pprof-addr", ":0"}, `--pprof-addr: ":0" is not a loopback address`},
		{"broker flag", []string{"broker", "--sinks", "kafka"}, "flag provided but not defined: --sinks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := invoke(c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Fatalf("stderr does not mention %q:\n%s", c.want, stderr)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Fatalf("stderr shows the password:\n%s", stderr)
			}
			if strings.Contains(stderr, "building the relay") {
				t.Fatalf("a bad flag built the relay first:\n%s", stderr)
			}
		})
	}
}

// --help prints the usage, then the mode's flags named --like-this, to
// stdout, and exits 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"burn-down", "--help"}, {"steady", "-h"}, {"soak", "--help"}, {"broker", "--help"}} {
		code, stdout, stderr := invoke(args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "Usage: relay-bench") {
			t.Errorf("relay-bench %v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
		if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindString(stdout); m != "" {
			t.Errorf("relay-bench %v names a flag with one dash (%q):\n%s", args, m, stdout)
		}
	}
	_, stdout, _ := invoke("burn-down", "--help")
	for _, want := range []string{"go build ./cmd/relay", "  --events int\n", "(default 1000000)", "  --relay-bin string\n", "  --no-ceiling\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("burn-down --help lacks %q:\n%s", want, stdout)
		}
	}
}

// soak's flags reach bench.Config, with the soak's defaults.
func TestSoakConfig(t *testing.T) {
	t.Parallel()
	parseSoak := func(args ...string) benchFlags {
		t.Helper()
		var bf benchFlags
		if err := parse(bf.flagSet(bench.ModeSoak), args, usage, io.Discard); err != nil {
			t.Fatal(err)
		}
		return bf
	}
	bf := parseSoak()
	cfg, err := bf.config(bench.ModeSoak)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rate != 500 || cfg.Duration != 10*time.Minute || cfg.Retention != 30*time.Second || cfg.JanitorInterval != 5*time.Second ||
		cfg.JanitorBatch != 1000 || cfg.SampleEvery != 30*time.Second || cfg.SampleInterval != time.Second {
		t.Errorf("soak defaults: %+v", cfg)
	}
	bf = parseSoak("--rate", "100", "--duration", "6s", "--retention", "1s", "--janitor-interval", "500ms", "--janitor-batch", "50", "--sample-every", "1s", "--vacuum-every", "2s")
	if cfg, err = bf.config(bench.ModeSoak); err != nil {
		t.Fatal(err)
	}
	if cfg.Rate != 100 || cfg.Duration != 6*time.Second || cfg.Retention != time.Second || cfg.JanitorInterval != 500*time.Millisecond ||
		cfg.JanitorBatch != 50 || cfg.SampleEvery != time.Second || cfg.VacuumEvery != 2*time.Second {
		t.Errorf("soak flags: %+v", cfg)
	}
}

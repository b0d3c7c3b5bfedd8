package main

import (
	"context"
	"strings"
	"testing"
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
		{"broker partitions", nil, []string{"broker", "--partitions", "0"}, "--partitions (OUTBOX_PARTITIONS)"},
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
	for _, args := range [][]string{{"--help"}, {"steady", "--help"}} {
		code, stdout, stderr := benchInvoke(nil, args...)
		if code != 0 || !strings.Contains(stdout+stderr, "burn-down|steady|idle") {
			t.Errorf("relay bench %v: exit %d, output:\n%s%s", args, code, stdout, stderr)
		}
	}
}

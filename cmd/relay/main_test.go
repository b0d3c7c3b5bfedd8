package main

import (
	"context"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// invoke runs the binary's entry point with env as the environment.
func invoke(ctx context.Context, env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut syncbuf.Buffer
	code = run(ctx, args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestBadConfigurationExits2NamingTheFlag(t *testing.T) {
	t.Parallel()
	url := "postgres://postgres@127.0.0.1:1/postgres"
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no command", nil, nil, "Usage"},
		{"unknown command", nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"missing database url", nil, []string{"run", "--sink", "stdout"}, "--database-url (OUTBOX_DATABASE_URL) is required"},
		{"bad batch size", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--batch-size", "0"}, "--batch-size (OUTBOX_BATCH_SIZE)"},
		{"bad lease from env", map[string]string{"OUTBOX_LEASE": "soon"}, []string{"run", "--sink", "stdout", "--database-url", url}, "--lease from OUTBOX_LEASE"},
		{"short lease", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--lease", "10ms"}, "--lease (OUTBOX_LEASE)"},
		{"backoff bounds", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--backoff-min", "1m", "--backoff-max", "1s"}, "--backoff-max"},
		{"unknown sink", nil, []string{"run", "--sink", "carrier-pigeon", "--database-url", url}, "--sink (OUTBOX_SINK)"},
		{"kafka without brokers", nil, []string{"run", "--database-url", url}, "--kafka-brokers (OUTBOX_KAFKA_BROKERS) is required"},
		{"bad table name", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--table", "outbox; DROP TABLE x"}, "--table (OUTBOX_TABLE)"},
		{"bad schema name", nil, []string{"migrate", "up", "--database-url", url, "--schema", "a.b"}, "--schema (OUTBOX_SCHEMA)"},
		{"bad log level", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--log-level", "loud"}, "--log-level"},
		{"unknown flag", nil, []string{"run", "--frobnicate"}, "frobnicate"},
		{"migrate without subcommand", nil, []string{"migrate"}, "up, down or status"},
		{"bad head-of-line policy", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--ordered-topics", "*", "--head-of-line", "sideways"}, "--head-of-line (OUTBOX_HEAD_OF_LINE)"},
		{"too many shards", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--ordered-topics", "orders", "--shards", "2000"}, "--shards (OUTBOX_SHARDS)"},
		{"round-robin breaks ordering", nil, []string{"run", "--database-url", url, "--kafka-brokers", "127.0.0.1:1", "--ordered-topics", "*", "--kafka-partitioner", "round-robin"}, "breaks --ordered-topics"},
		{"bad claim mode", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--claim-mode", "optimistic"}, "--claim-mode (OUTBOX_CLAIM_MODE)"},
		{"bad head-of-line without ordering", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--head-of-line", "sideways"}, "--head-of-line (OUTBOX_HEAD_OF_LINE)"},
		{"bad ordered topic", nil, []string{"run", "--sink", "stdout", "--database-url", url, "--ordered-topics", "orders,bad topic"}, "--ordered-topics (OUTBOX_ORDERED_TOPICS)"},
		{"bad database url", nil, []string{"migrate", "up", "--database-url", "postgres://u:hunter2@[::1"}, "--database-url (OUTBOX_DATABASE_URL)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := invoke(context.Background(), c.env, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Fatalf("stderr does not mention %q:\n%s", c.want, stderr)
			}
			if strings.Contains(stderr, "hunter2") {
				t.Fatalf("stderr leaks the password:\n%s", stderr)
			}
		})
	}
}

// --help prints to stdout (so that `relay run --help | less` works), names
// flags as the README does (--database-url) with each one's variable, and
// exits 0; stderr stays empty.
func TestHelpGoesToStdoutNamingFlagsWithTwoDashes(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "--help"}, {"run", "-h"}, {"migrate", "--help"}, {"migrate", "up", "--help"},
		{"demo", "--help"}, {"--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := invoke(context.Background(), nil, args...)
			if code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
			}
			if stderr != "" {
				t.Errorf("help wrote to stderr:\n%s", stderr)
			}
			if !strings.Contains(stdout, "Usage") {
				t.Fatalf("stdout has no usage:\n%s", stdout)
			}
			if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindString(stdout); m != "" {
				t.Errorf("help names a flag with one dash (%q):\n%s", m, stdout)
			}
		})
	}
	_, stdout, _ := invoke(context.Background(), nil, "run", "--help", "all")
	for _, want := range []string{
		"  --database-url string [OUTBOX_DATABASE_URL]\n",
		"  --kafka-sasl-password string [OUTBOX_KAFKA_SASL_PASSWORD]\n",
		"  --batch-size int [OUTBOX_BATCH_SIZE]\n        most rows one claim takes: claims start at --batch-min, double while they come back full and\n        halve when they come back less than a quarter full (default 1000)\n",
		"  --lease duration [OUTBOX_LEASE]\n        how long a claim is valid without renewal (default 30s)\n",
		"  --listen [OUTBOX_LISTEN]\n",
		`(default "kafka")`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("relay run --help all lacks %q:\n%s", want, stdout)
		}
	}
}

// --janitor-vacuum is on by default and sets relay.Config.NoVacuum
// inverted, from the command line or OUTBOX_JANITOR_VACUUM; the command
// line wins.
func TestJanitorVacuumFlag(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		env          string
		args         []string
		wantNoVacuum bool
	}{
		{"default", "", nil, false},
		{"off on the command line", "", []string{"--janitor-vacuum=false"}, true},
		{"off from the environment", "false", nil, true},
		{"command line wins", "false", []string{"--janitor-vacuum"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stderr syncbuf.Buffer
			f := newFlags("relay run", "", &stderr, func(k string) string {
				if k == "OUTBOX_JANITOR_VACUUM" {
					return c.env
				}
				return ""
			})
			var rf relayFlags
			rf.register(f)
			if err := f.parse(c.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := rf.config()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.NoVacuum != c.wantNoVacuum {
				t.Errorf("NoVacuum = %v, want %v", cfg.NoVacuum, c.wantNoVacuum)
			}
		})
	}
}

func TestRunNamesMigrateUpWhenTableIsMissing(t *testing.T) {
	t.Parallel()
	_, table := testdb.NewEmpty(t)
	code, _, stderr := invoke(context.Background(), nil, "run", "--sink", "stdout",
		"--database-url", testdb.URL(t), "--schema", table.Schema)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "relay migrate up") {
		t.Fatalf("stderr does not name `relay migrate up`:\n%s", stderr)
	}
}

func TestUnreachableDatabaseIsRetriedWithoutLeakingThePassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"run", "--sink", "stdout", "--database-url", "postgres://app:hunter2@127.0.0.1:1/db"},
			func(string) string { return "" }, &out, &errOut)
	}()
	await(t, 10*time.Second, func() bool { return strings.Count(errOut.String(), "database unreachable; retrying") >= 2 })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after cancel, want 0; stderr:\n%s", code, errOut.String())
	}
	if strings.Contains(errOut.String(), "hunter2") {
		t.Fatalf("logs leak the password:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "app:xxxxx@") {
		t.Fatalf("logs do not show the redacted URL:\n%s", errOut.String())
	}
}

func TestMigrateRetriesUnreachableDatabaseThenFails(t *testing.T) {
	t.Parallel()
	code, _, stderr := invoke(context.Background(), nil, "migrate", "up",
		"--database-url", "postgres://app:hunter2@127.0.0.1:1/db", "--timeout", "1500ms")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if strings.Count(stderr, "unreachable, retrying") < 2 || !strings.Contains(stderr, "did not answer before --timeout") {
		t.Fatalf("stderr does not show retries and the final error:\n%s", stderr)
	}
	if strings.Contains(stderr, "hunter2") {
		t.Fatalf("stderr leaks the password:\n%s", stderr)
	}
}

func TestMigrateAndRunWithStdoutSink(t *testing.T) {
	t.Parallel()
	pool, table := testdb.NewEmpty(t)
	url := testdb.URL(t)
	env := map[string]string{"OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": table.Schema}
	ctx := context.Background()

	code, out, stderr := invoke(ctx, env, "migrate", "up")
	if code != 0 || !strings.Contains(out, "applied 001_create_outbox") {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ = invoke(ctx, env, "migrate", "up"); code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate up: exit %d\n%s", code, out)
	}
	if code, out, _ = invoke(ctx, env, "migrate", "status"); code != 0 || !strings.Contains(out, "001_create_outbox") || !strings.Contains(out, "applied 2") {
		t.Fatalf("migrate status: exit %d\n%s", code, out)
	}

	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		res, err := w.Write(ctx, pool, outbox.Message{Topic: "cli.test", Key: []byte("k"), Payload: fmt.Appendf(nil, "event %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID.String())
	}
	runCtx, cancel := context.WithCancel(ctx)
	var runOut, runErr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "stdout", "--poll-interval", "20ms", "--log-format", "json"},
			func(k string) string { return env[k] }, &runOut, &runErr)
	}()
	await(t, 10*time.Second, func() bool {
		for _, id := range ids {
			if !strings.Contains(runOut.String(), id) {
				return false
			}
		}
		return true
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, runErr.String())
	}
	if !strings.Contains(runErr.String(), `"msg":"relay started"`) {
		t.Fatalf("no JSON start log:\n%s", runErr.String())
	}

	// Each down reverts the latest migration: 011, 010, ..., then 001.
	for _, want := range []string{"reverted 011_key_fillfactor_default", "reverted 010_key_fillfactor", "reverted 009_ordered_read_claims", "reverted 008_shard_ranges", "reverted 007_admin", "reverted 006_id_default", "reverted 005_ordered_pending_index", "reverted 004_retention", "reverted 003_wakeup", "reverted 002_ordered_delivery", "reverted 001_create_outbox"} {
		if code, out, _ = invoke(ctx, env, "migrate", "down"); code != 0 || !strings.Contains(out, want) {
			t.Fatalf("migrate down: exit %d, want %q\n%s", code, want, out)
		}
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table.Ident()).Scan(&exists); err != nil || exists {
		t.Fatalf("outbox table still exists after down (err %v)", err)
	}
}

// await polls cond until it holds. timeout only guards against a hang: it
// is raised to a minute, which a busy machine needs (every caller waits
// for something that happens within moments on an idle one).
func await(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	timeout = max(timeout, time.Minute)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitReadyz asks addr's /readyz until ok accepts its answer, and fails
// the test with the last one after a minute: a check that runs out of its
// time (readyTimeout) on a busy machine answers 503 now and then.
func awaitReadyz(t *testing.T, addr string, ok func(status int, body string) bool) (int, string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		status, body := get(t, addr, "/readyz")
		if ok(status, body) {
			return status, body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d\n%s", status, body)
		}
		time.Sleep(50 * time.Millisecond) // polling the endpoint; nothing to wait on
	}
}

// The commands that run relays collect garbage at defaultGOGC, unless
// GOGC is set; the others keep Go's setting.
func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	env := func(gogc string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return gogc
			}
			return ""
		}
	}
	for _, tc := range []struct {
		cmd, gogc string
		want      int
	}{
		{"run", "", defaultGOGC},
		{"demo", "", defaultGOGC},
		{"run", "50", 100},
		{"run", "off", 100},
		{"status", "", 100},
		{"migrate", "", 100},
	} {
		debug.SetGCPercent(100)
		tuneGC(tc.cmd, env(tc.gogc))
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("relay %s with GOGC=%q: GC percent %d, want %d", tc.cmd, tc.gogc, got, tc.want)
		}
	}
}

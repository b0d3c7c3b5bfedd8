package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// mysqlURL returns a fresh database on the shared MariaDB (mariadbtest.DB),
// a pool on it and its mysql:// URL, as relay's --database-url takes it.
func mysqlURL(t *testing.T) (*sql.DB, string, string) {
	t.Helper()
	db, dsn := mariadbtest.DB(t)
	cfg, err := mysqldsn.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return db, mysqldsn.URL(cfg), cfg.DBName
}

// writeMySQL commits n events of topic in one transaction with
// outbox.FromMySQL and returns event id -> key/payload.
func writeMySQL(t *testing.T, db *sql.DB, table outbox.Table, topic string, n int) map[string]string {
	t.Helper()
	ctx := context.Background()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%13), Payload: fmt.Appendf(nil, "event-%d", i)}
	}
	res, err := w.WriteBatch(ctx, outbox.FromMySQL(tx), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i, r := range res {
		want[r.ID.String()] = string(msgs[i].Key) + "/" + string(msgs[i].Payload)
	}
	return want
}

// countMySQL counts the rows of the table (in the connection's database)
// with the status.
func countMySQL(t *testing.T, db *sql.DB, table, status string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM `"+table+"` WHERE status = ?", status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// relay migrate up, status and down on a mysql:// URL; --schema unset means
// the URL's database.
func TestMySQLMigrate(t *testing.T) {
	t.Parallel()
	db, url, name := mysqlURL(t)
	env := map[string]string{"OUTBOX_DATABASE_URL": url}
	ctx := context.Background()

	code, out, stderr := invoke(ctx, env, "migrate", "up")
	if code != 0 || !strings.Contains(out, "applied 001_create_outbox to "+name+".outbox") {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr = invoke(ctx, env, "migrate", "up"); code != 0 || !strings.Contains(out, name+".outbox is up to date") {
		t.Fatalf("second migrate up: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr = invoke(ctx, env, "migrate", "status"); code != 0 || !strings.Contains(out, "001_create_outbox") || strings.Contains(out, "pending") {
		t.Fatalf("migrate status: exit %d\n%s%s", code, out, stderr)
	}
	// Another table of the same database, named with --schema as the
	// database and --table.
	if code, out, stderr = invoke(ctx, env, "migrate", "up", "--schema", name, "--table", "events"); code != 0 || !strings.Contains(out, "to "+name+".events") {
		t.Fatalf("migrate up --table events: exit %d\n%s%s", code, out, stderr)
	}
	var tables int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name IN ('outbox', 'events')", name).Scan(&tables); err != nil || tables != 2 {
		t.Fatalf("%d of outbox and events in %s (err %v)", tables, name, err)
	}
	for {
		code, out, stderr = invoke(ctx, env, "migrate", "down")
		if code != 0 {
			t.Fatalf("migrate down: exit %d\n%s%s", code, out, stderr)
		}
		if strings.Contains(out, "no applied migrations") {
			break
		}
		if !strings.Contains(out, "reverted 0") {
			t.Fatalf("migrate down: %s", out)
		}
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'outbox'", name).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("outbox still exists after every down (err %v)", err)
	}
}

// On a table that is not migrated, relay run on MySQL prints the relay
// migrate up command for it; run as printed, it migrates the table.
func TestMySQLRunPrintsTheExactMigrateCommand(t *testing.T) {
	t.Parallel()
	_, url, _ := mysqlURL(t)
	args := []string{"run", "--sink", "stdout", "--poll-interval", "20ms", "--database-url", url, "--table", "events"}
	code, _, stderr := invoke(context.Background(), nil, args...)
	want := "relay migrate up --database-url '" + url + "' --table events"
	if code != 1 || !strings.Contains(stderr, "run `"+want+"`") {
		t.Fatalf("exit %d, want 1 naming %q; stderr:\n%s", code, want, stderr)
	}
	words := shellWords(t, want, nil)
	if code, out, stderr := invoke(context.Background(), nil, words[1:]...); code != 0 || !strings.Contains(out, "applied 001_create_outbox") {
		t.Fatalf("%q: exit %d\n%s%s", words, code, out, stderr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int)
	var runErr lockedBuilder
	runErr.b = &strings.Builder{}
	go func() {
		done <- run(ctx, args, func(string) string { return "" }, io.Discard, &runErr)
	}()
	await(t, 10*time.Second, func() bool { return strings.Contains(runErr.String(), "relay started") })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run after the printed command: exit %d\n%s", code, runErr.String())
	}
}

// `relay run` processes on a mysql:// URL (the built binary) drain a table
// written with outbox.FromMySQL into a Kafka-protocol broker: every event
// arrives exactly once with its key and payload; /healthz, /readyz and the
// relay's metrics answer, without backlog gauges; SIGTERM exits 0.
func TestMySQLRunDeliversEveryEventOnce(t *testing.T) {
	t.Parallel()
	db, url, _ := mysqlURL(t)
	const topic = "mysql.run"
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	bin := buildBinary(t)
	env := append(os.Environ(), "OUTBOX_DATABASE_URL="+url, "OUTBOX_KAFKA_BROKERS="+strings.Join(br.Addrs(), ","))

	migrate := exec.Command(bin, "migrate", "up")
	migrate.Env = env
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("relay migrate up: %v\n%s", err, out)
	}
	const total = 1500
	want := writeMySQL(t, db, outbox.Table{}, topic, total)

	procs := startRelays(t, bin, env, 2, func(i int) []string {
		return []string{"--batch-size", "50", "--poll-interval", "20ms", "--relay-id", fmt.Sprintf("my-%d", i),
			"--log-format", "json", "--metrics-addr", "127.0.0.1:0"}
	})

	deadline := time.Now().Add(60 * time.Second)
	for countMySQL(t, db, "outbox", "sent") < total {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sent after 60s; stderr:\n%s", countMySQL(t, db, "outbox", "sent"), total, procs[0].stderr.String())
		}
		time.Sleep(20 * time.Millisecond) // the table's state: nothing to await but the rows
	}

	// Health and metrics of the first replica, at the address it logged.
	addr := loggedAddress(t, procs[0].stderr)
	for path, wantBody := range map[string]string{"/healthz": "ok", "/readyz": "database: ok"} {
		status, body := httpGet(t, "http://"+addr+path)
		if status != http.StatusOK || !strings.Contains(body, wantBody) {
			t.Errorf("%s: %d\n%s", path, status, body)
		}
	}
	_, metricsBody := httpGet(t, "http://"+addr+"/metrics")
	if !strings.Contains(metricsBody, "outbox_relay_") {
		t.Errorf("/metrics has no relay metrics:\n%s", metricsBody)
	}
	// The backlog gauges are read on MySQL too (the first read runs when
	// the listener starts), without read errors.
	deadline = time.Now().Add(time.Minute)
	for !strings.Contains(metricsBody, "\noutbox_backlog_rows{") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // the background read's first sample
		_, metricsBody = httpGet(t, "http://"+addr+"/metrics")
	}
	if !strings.Contains(metricsBody, "\noutbox_backlog_rows{") || !strings.Contains(metricsBody, "\noutbox_oldest_due_age_seconds{") {
		t.Errorf("/metrics has no backlog samples on MySQL:\n%s", grepLines(metricsBody, "outbox_backlog"))
	}
	for _, l := range strings.Split(metricsBody, "\n") {
		if strings.HasPrefix(l, "outbox_backlog_read_errors_total{") && !strings.HasSuffix(l, " 0") {
			t.Errorf("backlog reads failed on MySQL: %s", l)
		}
	}

	for i, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("replica %d exited with %v; stderr:\n%s", i, err, p.stderr.String())
		}
		if strings.Contains(p.stderr.String(), `"level":"ERROR"`) {
			t.Errorf("replica %d logged errors:\n%s", i, grepLines(p.stderr.String(), `"level":"ERROR"`))
		}
	}
	got := map[string]int{}
	for _, r := range kafkatest.ReadTopic(t, br.Addrs(), topic, nil) {
		id := r.EventID()
		got[id]++
		if want[id] != string(r.Key)+"/"+string(r.Value) {
			t.Errorf("event %s arrived as %q/%q, want %q", id, r.Key, r.Value, want[id])
		}
	}
	if len(got) != total {
		t.Errorf("%d distinct events on the topic, want %d", len(got), total)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s arrived %d times", id, n)
		}
	}
}

// loggedAddress waits for the JSON line announcing the metrics listener
// and returns its address.
func loggedAddress(t *testing.T, stderr *lockedBuilder) string {
	t.Helper()
	var addr string
	await(t, 10*time.Second, func() bool {
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var line struct {
				Msg     string `json:"msg"`
				Address string `json:"address"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving metrics and health checks" {
				addr = line.Address
				return true
			}
		}
		return false
	})
	return addr
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// What MySQL cannot do is a usage error (exit 2) naming the flag and where
// to read why, given before anything connects; the password never shows.
func TestMySQLRefusals(t *testing.T) {
	t.Parallel()
	url := "mysql://app:hunter2@127.0.0.1:1/shop"
	run := []string{"run", "--sink", "stdout", "--database-url", url}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"lock claims", append(run, "--claim-mode", "lock"), []string{"--claim-mode lock (OUTBOX_CLAIM_MODE)", "docs/ordering.md#mysql-and-mariadb"}},
		{"table patterns", append(run, "--tables", "svc_*.outbox"), []string{"--tables (OUTBOX_TABLES)", "list each table"}},
		{"no database", []string{"run", "--sink", "stdout", "--database-url", "mysql://app:hunter2@127.0.0.1:1/"}, []string{"names no database", "--schema"}},
		{"bad parameter", []string{"migrate", "up", "--database-url", url + "?parseTime=maybe"}, []string{"invalid value for --database-url (OUTBOX_DATABASE_URL)"}},
		{"partitions", []string{"migrate", "up", "--database-url", url, "--partition-interval", "24h"}, []string{"--partition-interval (OUTBOX_PARTITION_INTERVAL)", "not supported on MySQL"}},
		{"status without a database", []string{"status", "--database-url", "mysql://app:hunter2@127.0.0.1:1/"}, []string{"names no database", "--schema"}},
		{"failed list, bad parameter", []string{"failed", "list", "--database-url", url + "?parseTime=maybe"}, []string{"invalid value for --database-url (OUTBOX_DATABASE_URL)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := invoke(context.Background(), nil, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "hunter2") {
				t.Errorf("stderr shows the password:\n%s", stderr)
			}
		})
	}
}

// An unreachable MySQL is retried, logged with the password masked.
func TestMySQLMigrateRetriesWithoutLeakingThePassword(t *testing.T) {
	t.Parallel()
	code, _, stderr := invoke(context.Background(), nil, "migrate", "up",
		"--database-url", "mysql://app:hunter2@127.0.0.1:1/shop", "--timeout", "1500ms")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if strings.Count(stderr, "unreachable, retrying") < 2 || !strings.Contains(stderr, "mysql://app:xxxxx@127.0.0.1:1/shop") {
		t.Fatalf("stderr does not show retries with the masked URL:\n%s", stderr)
	}
	if strings.Contains(stderr, "hunter2") {
		t.Fatalf("stderr shows the password:\n%s", stderr)
	}
}

// The help says what --database-url and --schema mean on MySQL.
func TestMySQLHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"run", "--help"}, {"migrate", "--help"}} {
		_, stdout, _ := invoke(context.Background(), nil, args...)
		for _, want := range []string{"mysql://user:pass@host:3306/db", "on MySQL/MariaDB the database"} {
			if !strings.Contains(strings.Join(strings.Fields(stdout), " "), want) {
				t.Errorf("%v: help does not say %q", args, want)
			}
		}
	}
}

// relay demo on a mysql:// URL: a database of its own (--schema), the
// embedded Kafka-protocol broker, writers through outbox.FromMySQL, two
// relays; every committed event arrives, no rolled-back one.
func TestMySQLDemo(t *testing.T) {
	t.Parallel()
	db, url, name := mysqlURL(t) // a fresh database name, dropped at the end
	// The demo recreates the database on the server alone: the URL need
	// not name one.
	server := strings.TrimSuffix(url, name)
	code, stdout, stderr := invoke(context.Background(), nil, "demo", "--database-url", server, "--schema", name,
		"--events", "300", "--writers", "2", "--relays", "2", "--timeout", "1m")
	if code != 0 || !strings.Contains(stdout, "OK: every committed event arrived intact") || !strings.Contains(stdout, "database "+name+" dropped, created and migrated") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if n := countMySQL(t, db, "outbox", "sent"); n == 0 {
		t.Errorf("no sent rows in %s.outbox", name)
	}
	for _, line := range []string{"sent by demo-relay-1", "sent by demo-relay-2"} {
		if !strings.Contains(stdout, line) {
			t.Errorf("the summary lacks %q:\n%s", line, stdout)
		}
	}
	// Per-key ordering is refused before anything is touched.
	code, _, stderr = invoke(context.Background(), nil, "demo", "--database-url", server, "--schema", name, "--ordered")
	if code != 2 || !strings.Contains(stderr, "--ordered (OUTBOX_ORDERED)") || !strings.Contains(stderr, "docs/ordering.md#mysql-and-mariadb") {
		t.Fatalf("demo --ordered: exit %d, want 2; stderr:\n%s", code, stderr)
	}
}

// A server the relay cannot run on is refused by relay migrate up and relay
// run with the server check's own words: here a MariaDB writing a
// statement-based binary log.
func TestMySQLStatementBinlogIsRefused(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Private(t, "--log-bin", "--binlog-format=STATEMENT")
	_, dsn := srv.DB(t)
	cfg, err := mysqldsn.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	url := mysqldsn.URL(cfg)
	for _, args := range [][]string{
		{"migrate", "up", "--database-url", url},
		{"run", "--sink", "stdout", "--database-url", url},
	} {
		code, _, stderr := invoke(context.Background(), nil, args...)
		if code != 1 || !strings.Contains(stderr, "binlog_format=STATEMENT") || !strings.Contains(stderr, "set binlog_format=ROW") {
			t.Errorf("%v: exit %d, want 1 with the binlog refusal; stderr:\n%s", args[:2], code, stderr)
		}
	}
}

// --tables on MySQL: a listed table that is not migrated is reported with
// its command before any relay starts; once migrated, one relay run serves
// every table listed, a table in another database named database.table.
func TestMySQLRunSeveralTables(t *testing.T) {
	t.Parallel()
	db, url, name := mysqlURL(t)
	other, otherURL, otherName := mysqlURL(t)
	env := map[string]string{"OUTBOX_DATABASE_URL": url}
	ctx := context.Background()
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "up", "--table", "events"}} {
		if code, out, stderr := invoke(ctx, env, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
	}
	args := []string{"run", "--sink", "stdout", "--poll-interval", "20ms", "--tables", "outbox,events," + otherName + ".outbox"}
	code, _, stderr := invoke(ctx, env, args...)
	want := `relay migrate up --database-url "$OUTBOX_DATABASE_URL" --schema ` + otherName
	if code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, want 1 naming %q; stderr:\n%s", code, want, stderr)
	}
	if code, out, stderr := invoke(ctx, map[string]string{"OUTBOX_DATABASE_URL": otherURL}, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up %s: exit %d\n%s%s", otherName, code, out, stderr)
	}

	ids := map[string]bool{}
	for id := range writeMySQL(t, db, outbox.Table{}, "a", 20) {
		ids[id] = true
	}
	for id := range writeMySQL(t, db, outbox.Table{Schema: name, Name: "events"}, "b", 20) {
		ids[id] = true
	}
	for id := range writeMySQL(t, other, outbox.Table{}, "c", 20) {
		ids[id] = true
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errOut lockedBuilder
	out.b, errOut.b = &strings.Builder{}, &strings.Builder{}
	done := make(chan int)
	go func() { done <- run(runCtx, args, func(k string) string { return env[k] }, &out, &errOut) }()
	await(t, 20*time.Second, func() bool {
		for id := range ids {
			if !strings.Contains(out.String(), id) {
				return false
			}
		}
		return true
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, errOut.String())
	}
	for _, table := range []string{name + ".outbox", name + ".events", otherName + ".outbox"} {
		if !strings.Contains(errOut.String(), table) {
			t.Errorf("the log does not name %s:\n%s", table, errOut.String())
		}
	}
}

// The MySQL pool is sized as PostgreSQL's: --workers + 4 connections per
// table (at least 4, or the CPUs), all of them kept idle.
func TestMySQLPoolSize(t *testing.T) {
	t.Parallel()
	d := dbFlags{url: "mysql://app:pw@127.0.0.1:1/shop", minConns: 3 * (8 + 4)}
	db, err := d.mysqlDB()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.Stats().MaxOpenConnections; got != max(36, runtime.NumCPU()) {
		t.Errorf("MaxOpenConnections = %d, want %d", got, max(36, runtime.NumCPU()))
	}
}

// MySQL has no LISTEN/NOTIFY: relay run turns --listen off there, so that
// the relay polls adaptively from --poll-min, and leaves it on for
// PostgreSQL.
func TestMySQLRunDoesNotListen(t *testing.T) {
	t.Parallel()
	for url, wantNoListen := range map[string]bool{
		"mysql://app@127.0.0.1:1/shop":        true,
		"postgres://app@127.0.0.1:1/postgres": false,
	} {
		f := newFlags("relay run", "", io.Discard, func(string) string { return "" })
		var o runOptions
		o.register(f)
		if err := f.parse([]string{"--sink", "stdout", "--database-url", url}); err != nil {
			t.Fatal(err)
		}
		c, err := o.config()
		if err != nil {
			t.Fatal(err)
		}
		if c.relay.NoListen != wantNoListen {
			t.Errorf("%s: NoListen = %v, want %v", url, c.relay.NoListen, wantNoListen)
		}
	}
}

// relay run on an unreachable MySQL waits for it, logging the URL with
// its password masked, and exits 0 when stopped.
func TestMySQLRunRetriesUnreachableDatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var errOut lockedBuilder
	errOut.b = &strings.Builder{}
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"run", "--sink", "stdout", "--database-url", "mysql://app:hunter2@127.0.0.1:1/shop"},
			func(string) string { return "" }, io.Discard, &errOut)
	}()
	await(t, 10*time.Second, func() bool { return strings.Count(errOut.String(), "database unreachable; retrying") >= 2 })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after cancel, want 0; stderr:\n%s", code, errOut.String())
	}
	if strings.Contains(errOut.String(), "hunter2") {
		t.Fatalf("logs leak the password:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "mysql://app:xxxxx@127.0.0.1:1/shop") {
		t.Fatalf("logs do not show the masked URL:\n%s", errOut.String())
	}
}

// proc is a `relay run` process and what it wrote to stderr.
type proc struct {
	cmd    *exec.Cmd
	stderr *lockedBuilder
}

// startRelays starts n `relay run` processes with env and the arguments
// args gives each, and kills those still running when the test ends.
func startRelays(t *testing.T, bin string, env []string, n int, args func(i int) []string) []proc {
	t.Helper()
	var procs []proc
	for i := range n {
		cmd := exec.Command(bin, append([]string{"run"}, args(i)...)...)
		cmd.Env = env
		p := proc{cmd: cmd, stderr: &lockedBuilder{b: &strings.Builder{}}}
		cmd.Stderr = p.stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
		}
	})
	return procs
}

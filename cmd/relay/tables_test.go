package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// tablesSetup returns a pool and a fresh schema (dropped when the test
// ends) in which each of names is a migrated outbox table.
func tablesSetup(t testing.TB, names ...string) (*pgxpool.Pool, string) {
	t.Helper()
	pool, empty := testdb.NewEmpty(t)
	for _, n := range names {
		if _, err := migrations.Up(context.Background(), pool, outbox.Table{Schema: empty.Schema, Name: n}); err != nil {
			t.Fatalf("migrate %s: %v", n, err)
		}
	}
	return pool, empty.Schema
}

// startRun runs relay run in this process with args until the test ends
// (or stop is called) and returns its stderr and a stop function that
// returns its exit code.
func startRun(t testing.TB, env map[string]string, args ...string) (stderr *syncbuf.Buffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errBuf syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"run"}, args...), func(k string) string { return env[k] }, &out, &errBuf)
	}()
	code, stopped := 0, false
	stop = func() int {
		if !stopped {
			cancel()
			code, stopped = <-done, true
		}
		return code
	}
	t.Cleanup(func() { stop() })
	return &errBuf, stop
}

// The entries of --tables: names in --schema or their own, patterns, each
// once; the problems name the flag and every bad entry.
func TestTablesFlagSpecs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		want    []string // tableSpec.String, "*" suffix for patterns
		wantErr []string
	}{
		{"off", nil, nil, nil, nil},
		{"names, schema from --schema", nil, []string{"--schema", "billing", "--tables", "outbox, orders.events,billing.outbox"},
			[]string{"billing.outbox", "orders.events"}, nil},
		{"patterns", map[string]string{"OUTBOX_TABLES": "svc_*.outbox,ops.out[0-9]"}, nil,
			[]string{"svc_*.outbox*", "ops.out[0-9]*"}, nil},
		{"with --table", nil, []string{"--table", "events", "--tables", "a,b"}, nil,
			[]string{"--table (OUTBOX_TABLE) and --tables (OUTBOX_TABLES) set together"}},
		{"bad entries", nil, []string{"--tables", "a,1bad,x.[,a.b.c"}, nil,
			[]string{`--tables (OUTBOX_TABLES): "1bad"`, `--tables (OUTBOX_TABLES): "x.["`, `--tables (OUTBOX_TABLES): "a.b.c"`}},
		{"only commas", nil, []string{"--tables", ", ,"}, nil, []string{`--tables (OUTBOX_TABLES): ", ," names no table`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFlags("relay run", "", &strings.Builder{}, func(k string) string { return c.env[k] })
			var db dbFlags
			db.register(f, "")
			var tf tablesFlag
			tf.register(f)
			if err := f.parse(c.args); err != nil {
				t.Fatal(err)
			}
			specs, err := tf.specs(f, db)
			for _, w := range c.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not say %q", err, w)
				}
			}
			if len(c.wantErr) == 0 && err != nil {
				t.Fatal(err)
			}
			if len(c.wantErr) > 0 {
				return
			}
			var got []string
			for _, s := range specs {
				g := s.String()
				if s.pattern {
					g += "*"
				}
				got = append(got, g)
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("specs = %q, want %q", got, c.want)
			}
		})
	}
}

// One relay run serves three tables, named in a list or by a pattern, and
// publishes every committed event of each; the backlog gauges and the
// health checks name each table.
func TestRunServesSeveralTables(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		tables func(schema string) string
	}{
		{"listed", func(schema string) string { return "a,b," + schema + ".c" }},
		{"pattern", func(schema string) string { return schema + ".*" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			names := []string{"a", "b", "c"}
			pool, schema := tablesSetup(t, names...)
			ctx := context.Background()
			// A table of the schema that is not migrated: the pattern
			// leaves it out (a relay on it would fail the start).
			if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".not_an_outbox (id int)"); err != nil {
				t.Fatal(err)
			}
			br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"tables.a", "tables.b", "tables.c"}})
			if err != nil {
				t.Fatal(err)
			}
			defer br.Close()
			const perTable = 300
			for i, n := range names {
				w, err := outbox.NewWriter(outbox.WriterConfig{Table: outbox.Table{Schema: schema, Name: n}})
				if err != nil {
					t.Fatal(err)
				}
				msgs := make([]outbox.Message, perTable-i*100) // 300, 200, 100
				for j := range msgs {
					msgs[j] = outbox.Message{Topic: "tables." + n, Payload: fmt.Appendf(nil, "%s-%d", n, j)}
				}
				if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
					t.Fatal(err)
				}
			}
			env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": schema, "OUTBOX_KAFKA_BROKERS": strings.Join(br.Addrs(), ",")}
			observed := filepath.Join(t.TempDir(), "observe.jsonl")
			stderr, stop := startRun(t, env, "--tables", c.tables(schema), "--poll-interval", "20ms", "--log-format", "json",
				"--metrics-addr", "127.0.0.1:0", "--metrics-backlog-interval", "50ms", "--observe-file", observed)
			addr := metricsAddr(t, stderr)
			for i, n := range names {
				testdb.AwaitSent(t, pool, outbox.Table{Schema: schema, Name: n}, perTable-i*100, 30*time.Second)
			}
			// Each arrived once at the broker, on its table's topic.
			for i, n := range names {
				if got := countRecords(t, br, "tables."+n); got != perTable-i*100 {
					t.Errorf("topic tables.%s holds %d records, want %d", n, got, perTable-i*100)
				}
			}
			// A relay per table, each logging its table.
			for _, n := range names {
				if !strings.Contains(stderr.String(), `"msg":"relay started","relay_id"`) || !strings.Contains(stderr.String(), `"table":"`+schema+"."+n+`"`) {
					t.Errorf("no log line names table %s.%s:\n%s", schema, n, stderr.String())
				}
			}
			var m map[string]float64
			await(t, 10*time.Second, func() bool {
				m = scrape(t, addr)
				for _, n := range names {
					if v, ok := m[`outbox_backlog_rows{state="pending_due",table="`+schema+"."+n+`"}`]; !ok || v != 0 {
						return false
					}
				}
				return true
			})
			if _, ok := m[`outbox_oldest_due_age_seconds{table="`+schema+`.a"}`]; !ok {
				t.Errorf("no outbox_oldest_due_age_seconds for %s.a", schema)
			}
			// Ready once every check answers in time: on a busy machine a
			// check may run out of its time now and then.
			_, body := awaitReadyz(t, addr, func(status int, _ string) bool { return status == http.StatusOK })
			for _, n := range names {
				for _, check := range []string{"relay ", "schema "} {
					if !strings.Contains(body, check+schema+"."+n+": ok\n") {
						t.Errorf("/readyz has no %q line for %s:\n%s", check+"T: ok", n, body)
					}
				}
			}
			if strings.Contains(body, "not_an_outbox") {
				t.Errorf("the pattern matched a table that is not migrated:\n%s", body)
			}
			if status, body := get(t, addr, "/healthz"); status != http.StatusOK || body != "ok\n" {
				t.Errorf("/healthz: %d %q", status, body)
			}
			if code := stop(); code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			// The observe file says which table's relay sent what.
			data, err := os.ReadFile(observed)
			if err != nil {
				t.Fatal(err)
			}
			sentBy := map[string]int{}
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				var l struct {
					Kind   string `json:"kind"`
					Table  string `json:"table"`
					Result struct {
						Sent int `json:"sent"`
					} `json:"result"`
				}
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatalf("observe file line %q: %v", line, err)
				}
				if l.Kind == "recorded" {
					sentBy[l.Table] += l.Result.Sent
				}
			}
			for i, n := range names {
				if got := sentBy[schema+"."+n]; got != perTable-i*100 {
					t.Errorf("the observe file's recorded lines of %s.%s count %d sent, want %d (all: %v)", schema, n, got, perTable-i*100, sentBy)
				}
			}
		})
	}
}

// countRecords counts the distinct events of topic at the broker and
// fails the test on a duplicate.
func countRecords(t *testing.T, br *kfakebroker.Broker, topic string) int {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range kafkatest.ReadTopic(t, br.Addrs(), topic, nil) {
		if seen[r.EventID()] {
			t.Errorf("event %s arrived twice on %s", r.EventID(), topic)
		}
		seen[r.EventID()] = true
	}
	return len(seen)
}

// A table that is behind stops the start, before any relay claims, with
// the migrate command for that very table (each table behind is named);
// a pattern that matches no migrated table stops it too.
func TestRunTablesNotMigrated(t *testing.T) {
	t.Parallel()
	pool, schema := tablesSetup(t, "a")
	ctx := context.Background()
	url := testdb.URL(t)
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: outbox.Table{Schema: schema, Name: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, pool, outbox.Message{Topic: "t", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OUTBOX_DATABASE_URL": url}
	code, _, stderr := invoke(ctx, env, "run", "--sink", "stdout", "--schema", schema, "--tables", "a,b,other_"+schema[5:]+".c")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, stderr)
	}
	for _, want := range []string{
		"run `relay migrate up --database-url \"$OUTBOX_DATABASE_URL\" --schema " + schema + " --table b`",
		"run `relay migrate up --database-url \"$OUTBOX_DATABASE_URL\" --schema other_" + schema[5:] + " --table c`",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "--table a`") {
		t.Errorf("stderr names the migrated table a:\n%s", stderr)
	}
	var pending int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".a WHERE status = 'pending'").Scan(&pending); err != nil || pending != 1 {
		t.Errorf("table a: %d pending (%v), want 1: a relay claimed before the check", pending, err)
	}

	code, _, stderr = invoke(ctx, env, "run", "--sink", "stdout", "--tables", schema+".nothing_*")
	if code != 1 || !strings.Contains(stderr, schema+".nothing_* matched no migrated outbox table") {
		t.Errorf("a pattern matching nothing: exit %d\n%s", code, stderr)
	}
}

// Each table keeps its own retention: the janitor of each relay deletes
// the expired sent rows of its table (and no others), recording the run in
// that table's own jobs table.
func TestRunTablesRetentionPerTable(t *testing.T) {
	t.Parallel()
	names := []string{"a", "b"}
	pool, schema := tablesSetup(t, names...)
	ctx := context.Background()
	for _, n := range names {
		table := outbox.Table{Schema: schema, Name: n}
		// 50 rows sent a day ago (expired), 5 sent now (kept).
		if _, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+" (topic, payload, status, sent_at) "+
			"SELECT 'ret', '\\x00'::bytea, 'sent', now() - interval '1 day' FROM generate_series(1, 50) "+
			"UNION ALL SELECT 'ret', '\\x00'::bytea, 'sent', now() FROM generate_series(1, 5)"); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": schema}
	stderr, stop := startRun(t, env, "--tables", "a,b", "--sink", "stdout", "--retention", "1h", "--janitor-interval", "50ms", "--janitor-vacuum=false")
	for _, n := range names {
		table := outbox.Table{Schema: schema, Name: n}
		awaitCount(t, pool, table, "status = 'sent'", func(c int) bool { return c == 5 }, 30*time.Second)
		var total int64
		if err := pool.QueryRow(ctx, "SELECT coalesce(sum(total_deleted), 0) FROM "+table.Related("jobs")).Scan(&total); err != nil {
			t.Fatal(err)
		}
		if total != 50 {
			t.Errorf("%s: the jobs table counts %d rows deleted, want 50", table, total)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/syncbuf"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// relayProc is a `relay run` process started by startRelay.
type relayProc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result, once done is closed
}

// startRelay starts the built binary with args, OUTBOX_* settings env on
// top of the test's environment. The process is killed when the test ends
// if it is still running.
func startRelay(t *testing.T, env map[string]string, args ...string) *relayProc {
	t.Helper()
	p := &relayProc{cmd: exec.Command(buildBinary(t), args...), stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = os.Environ()
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stderr, p.stderr // the stdout sink is not used here
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits up to d for the process to exit and returns its exit code; it
// fails the test when the process is still running by then.
func (p *relayProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still running after %v; stderr:\n%s", strings.Join(p.cmd.Args[1:3], " "), d, syncbuf.Tail(p.stderr.String(), 4000))
	}
	var exit *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exit) {
		t.Fatalf("wait: %v", p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

// running reports whether the process has not exited.
func (p *relayProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// awaitCond polls cond every 20ms until it holds; after d it fails the
// test with what the relay logged.
func awaitCond(t *testing.T, p *relayProc, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; relay stderr:\n%s", what, d, syncbuf.Tail(p.stderr.String(), 4000))
		}
		if !p.running() {
			t.Fatalf("%s: the relay exited (%v); stderr:\n%s", what, p.err, syncbuf.Tail(p.stderr.String(), 4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// badRow is a row inserted by hand that the relay must fail with a reason.
type badRow struct {
	name    string
	topic   string
	headers string
	payload []byte
	set     string // extra assignments after the insert, e.g. "attempt = 50"
	reason  []string
}

// Rows that no writer would produce, inserted by hand between good events,
// go to failed with a reason naming what is wrong with them; every good
// event of the same batches is delivered exactly once; the relay process
// keeps serving and delivers an event written afterwards.
func TestBadRowsFailWithReasonAndTheRelayKeepsServing(t *testing.T) {
	t.Parallel()
	const (
		topic    = "badinput.good"
		maxBytes = 64 << 10 // the broker's message.max.bytes
	)
	pool, table := testdb.New(t)
	ctx := context.Background()
	br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{topic}, MaxMessageBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}

	bad := []badRow{
		{name: "headers are a JSON array", topic: topic, headers: `[1, 2]`,
			reason: []string{"malformed row: headers are not a JSON object of string values", "array"}},
		{name: "header value is a number", topic: topic, headers: `{"content-type": "text/plain", "n": 1}`,
			reason: []string{"malformed row: headers are not a JSON object of string values", "number"}},
		{name: "header value is null", topic: topic, headers: `{"trace": null}`,
			reason: []string{"malformed row: headers are not a JSON object of string values", `"trace" is null`}},
		{name: "reserved header", topic: topic, headers: `{"outbox-event-id": "forged"}`,
			reason: []string{"malformed row: outbox: invalid header", `"outbox-event-id" is reserved`}},
		{name: "header name with a space", topic: topic, headers: `{"bad name": "v"}`,
			reason: []string{"malformed row: outbox: invalid header", `"bad name"`}},
		{name: "invalid topic name", topic: "orders/created!", headers: `{}`,
			reason: []string{"malformed row: outbox: invalid topic", "'/' at offset 6"}},
		{name: "topic longer than Kafka allows", topic: strings.Repeat("t", outbox.MaxTopicLen+1), headers: `{}`,
			reason: []string{"malformed row: outbox: invalid topic", "250 bytes, longer than 249"}},
		{name: "topic the broker does not have", topic: "badinput.missing", headers: `{}`,
			reason: []string{"permanent: kafka: topic \"badinput.missing\"", "Unknown Topic Or Partition"}},
		{name: "payload over the broker's limit", topic: topic, headers: `{}`, payload: bytes.Repeat([]byte("x"), 2*maxBytes),
			reason: []string{"permanent: ", "Message Size Too Large"}},
		{name: "payload past --max-event-bytes", topic: topic, headers: `{}`, payload: bytes.Repeat([]byte("x"), 2<<20),
			reason: []string{"event too large: 20971", "exceed the limit of 1048576"}},
		{name: "created_at is infinity", topic: topic, headers: `{}`, set: "created_at = 'infinity'",
			reason: []string{"malformed row: created_at is not a finite time"}},
		{name: "attempt beyond max attempts", topic: topic, headers: `{}`, set: "attempt = 50",
			reason: []string{"attempt 51 exceeds max attempts 10"}},
		{name: "attempt at the integer limit", topic: topic, headers: `{}`, set: "attempt = 2147483647",
			reason: []string{"attempt 2147483647 exceeds max attempts 10"}},
	}
	good := map[uuid.UUID]string{} // id -> payload
	writeGood := func(i int) uuid.UUID {
		payload := fmt.Sprintf("good event %d", i)
		res, err := w.Write(ctx, pool, outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%5), Payload: []byte(payload),
			Headers: map[string]string{"content-type": "text/plain"}})
		if err != nil {
			t.Fatal(err)
		}
		good[res.ID] = payload
		return res.ID
	}
	badIDs := map[uuid.UUID]badRow{}
	for i, b := range bad {
		writeGood(2 * i)
		id := uuid.Must(uuid.NewV7())
		payload := b.payload
		if payload == nil {
			payload = []byte("bad")
		}
		if _, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+" (id, topic, payload, headers) VALUES ($1, $2, $3, $4::jsonb)",
			id, b.topic, payload, b.headers); err != nil {
			t.Fatalf("insert %s: %v", b.name, err)
		}
		if b.set != "" {
			if _, err := pool.Exec(ctx, "UPDATE "+table.Ident()+" SET "+b.set+" WHERE id = $1", id); err != nil {
				t.Fatalf("update %s: %v", b.name, err)
			}
		}
		badIDs[id] = b
		writeGood(2*i + 1)
	}
	total := len(good) + len(badIDs)

	p := startRelay(t, map[string]string{
		"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema,
		"OUTBOX_KAFKA_BROKERS": strings.Join(br.Addrs(), ","),
	}, "run", "--poll-interval", "20ms", "--max-event-bytes", "1048576", "--log-format", "json")
	settled := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status IN ('sent', 'failed')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	awaitCond(t, p, 60*time.Second, "every row sent or failed", func() bool { return settled() == total })

	for id, b := range badIDs {
		var status string
		var lastError *string
		if err := pool.QueryRow(ctx, "SELECT status, last_error FROM "+table.Ident()+" WHERE id = $1", id).Scan(&status, &lastError); err != nil {
			t.Fatal(err)
		}
		if status != "failed" || lastError == nil {
			t.Errorf("%s: status %s, last_error %v; want failed with a reason", b.name, status, lastError)
			continue
		}
		t.Logf("%s: %s", b.name, *lastError)
		for _, want := range b.reason {
			if !strings.Contains(*lastError, want) {
				t.Errorf("%s: last_error %q does not say %q", b.name, *lastError, want)
			}
		}
		// The relay logs a failed event after its write-back commits:
		// wait for the line.
		for end := time.Now().Add(10 * time.Second); !strings.Contains(p.stderr.String(), id.String()) && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		if !strings.Contains(p.stderr.String(), id.String()) {
			t.Errorf("%s: the relay did not log the failed event %s", b.name, id)
		}
	}
	checkGood := func() {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT id, status, attempt FROM "+table.Ident()+" WHERE id = ANY($1)", keys(good))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var id uuid.UUID
			var status string
			var attempt int
			if err := rows.Scan(&id, &status, &attempt); err != nil {
				t.Fatal(err)
			}
			n++
			if status != "sent" || attempt != 1 {
				t.Errorf("good event %s: status %s, attempt %d; want sent on attempt 1", id, status, attempt)
			}
		}
		if err := rows.Err(); err != nil || n != len(good) {
			t.Fatalf("read %d of %d good rows: %v", n, len(good), err)
		}
		seen := map[string]int{}
		for _, r := range kafkatest.ReadTopic(t, br.Addrs(), topic, nil) {
			id := r.EventID()
			seen[id]++
			want, ok := good[uuid.MustParse(id)]
			if !ok {
				t.Errorf("record %s on %s is not a good event (key %q, %d bytes)", id, topic, r.Key, len(r.Value))
			} else if string(r.Value) != want {
				t.Errorf("event %s arrived as %q, want %q", id, r.Value, want)
			}
		}
		for id := range good {
			if seen[id.String()] != 1 {
				t.Errorf("good event %s arrived %d times, want once", id, seen[id.String()])
			}
		}
	}
	checkGood()

	// Still serving: an event written now goes through.
	later := writeGood(len(good))
	awaitCond(t, p, 30*time.Second, "the event written after the bad rows is sent", func() bool {
		var status string
		if err := pool.QueryRow(ctx, "SELECT status FROM "+table.Ident()+" WHERE id = $1", later).Scan(&status); err != nil {
			t.Fatal(err)
		}
		return status == "sent"
	})
	checkGood()
	var unsettled int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status IN ('pending', 'processing')").Scan(&unsettled); err != nil {
		t.Fatal(err)
	}
	if unsettled != 0 {
		t.Errorf("%d rows still pending or processing", unsettled)
	}
	if strings.Contains(p.stderr.String(), "database error") {
		t.Errorf("the relay reported database errors:\n%s", syncbuf.Tail(p.stderr.String(), 4000))
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, syncbuf.Tail(p.stderr.String(), 4000))
	}
}

func keys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A table migrated by a newer binary (a version this one does not know)
// stops `relay run` at once, saying so, instead of retrying; `relay migrate
// up` and `down` refuse to touch it.
func TestSchemaNewerThanTheBinaryIsRefused(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	future := migrations.Latest() + 1
	if _, err := pool.Exec(ctx, "INSERT INTO "+table.Related("migrations")+" (version, name) VALUES ($1, 'from_the_future')", future); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema}

	start := time.Now()
	p := startRelay(t, env, "run", "--sink", "stdout")
	if code := p.wait(t, 15*time.Second); code != 1 {
		t.Fatalf("relay run: exit %d, want 1; stderr:\n%s", code, p.stderr.String())
	}
	stderr := p.stderr.String()
	want := fmt.Sprintf("table %s is at version %d, this binary knows up to %d: outbox schema is newer than this binary; upgrade the relay",
		table, future, migrations.Latest())
	if !strings.Contains(stderr, want) {
		t.Errorf("relay run does not say %q:\n%s", want, stderr)
	}
	if strings.Contains(stderr, "retrying") || strings.Contains(stderr, "relay started") {
		t.Errorf("relay run retried or started instead of stopping:\n%s", stderr)
	}
	t.Logf("relay run stopped after %v", time.Since(start).Round(time.Millisecond))

	for _, sub := range []string{"up", "down"} {
		p := startRelay(t, env, "migrate", sub)
		if code := p.wait(t, 30*time.Second); code != 1 {
			t.Errorf("migrate %s: exit %d, want 1; output:\n%s", sub, code, p.stderr.String())
		}
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("migrate %s does not say %q:\n%s", sub, want, p.stderr.String())
		}
	}
	states, err := migrations.Status(ctx, pool, table)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if !s.Applied() {
			t.Errorf("migration %03d_%s was reverted", s.Version, s.Name)
		}
	}
}

// A database role that may not use the outbox table makes `relay run` exit
// at once with the server's permission error (not retry forever); `relay
// migrate up` as that role fails the same way where it has something to
// do, and nothing is written.
func TestRoleWithoutPrivilegesIsRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		grants []string // {{schema}}, {{migrations}} and {{role}} are replaced
		// What `relay migrate up` does on the migrated table: a role that
		// can read the versions sees that there is nothing to do.
		migrateExit int
		migrateSays string
	}{
		{"no grants", nil, 1, "permission denied for schema"},
		{"may read the schema version only", []string{
			"GRANT USAGE ON SCHEMA {{schema}} TO {{role}}",
			"GRANT SELECT ON {{migrations}} TO {{role}}",
		}, 0, "is up to date"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pool, table := testdb.New(t)
			ctx := context.Background()
			w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			res, err := w.Write(ctx, pool, outbox.Message{Topic: "perm.test", Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			role := newRole(t, pool)
			for _, g := range c.grants {
				g = strings.NewReplacer("{{schema}}", pgx.Identifier{table.Schema}.Sanitize(),
					"{{migrations}}", table.Related("migrations"), "{{role}}", pgx.Identifier{role}.Sanitize()).Replace(g)
				if _, err := pool.Exec(ctx, g); err != nil {
					t.Fatal(err)
				}
			}
			u, err := url.Parse(testdb.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.User(role)
			env := map[string]string{"OUTBOX_DATABASE_URL": u.String(), "OUTBOX_SCHEMA": table.Schema}

			p := startRelay(t, env, "run", "--sink", "stdout", "--poll-interval", "20ms")
			if code := p.wait(t, 15*time.Second); code != 1 {
				t.Fatalf("relay run: exit %d, want 1; stderr:\n%s", code, syncbuf.Tail(p.stderr.String(), 4000))
			}
			if s := p.stderr.String(); !strings.Contains(s, "permission denied") || strings.Count(s, "retrying") > 0 {
				t.Errorf("relay run does not stop at once naming the permission problem:\n%s", syncbuf.Tail(s, 4000))
			}

			p = startRelay(t, env, "migrate", "up")
			if code := p.wait(t, 30*time.Second); code != c.migrateExit || !strings.Contains(p.stderr.String(), c.migrateSays) {
				t.Errorf("migrate up: exit %d, want %d saying %q; output:\n%s", code, c.migrateExit, c.migrateSays, p.stderr.String())
			}

			// A fresh table: migrate up has work to do and may not.
			fresh := "fresh_" + strings.TrimPrefix(role, "relay_noperm_")
			t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+fresh+" CASCADE") })
			env["OUTBOX_SCHEMA"] = fresh
			p = startRelay(t, env, "migrate", "up")
			if code := p.wait(t, 30*time.Second); code != 1 || !strings.Contains(p.stderr.String(), "permission denied for database") {
				t.Errorf("migrate up of a new table: exit %d, want 1 naming the missing permission; output:\n%s", code, p.stderr.String())
			}
			var created bool
			if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", fresh).Scan(&created); err != nil || created {
				t.Errorf("migrate up created schema %s (err %v)", fresh, err)
			}

			var status string
			var attempt int
			if err := pool.QueryRow(ctx, "SELECT status, attempt FROM "+table.Ident()+" WHERE id = $1", res.ID).Scan(&status, &attempt); err != nil {
				t.Fatal(err)
			}
			if status != "pending" || attempt != 0 {
				t.Errorf("the event is %s at attempt %d; want it untouched (pending, 0)", status, attempt)
			}
			if err := migrations.Check(ctx, pool, table); err != nil {
				t.Errorf("schema changed: %v", err)
			}
		})
	}
}

// newRole creates a login role without any privileges, dropped when the
// test ends.
func newRole(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := "relay_noperm_" + hex.EncodeToString(b[:])
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := pool.Exec(context.Background(), "CREATE ROLE "+ident+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		// Connections of the role's relays may still be closing.
		if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role); err != nil {
			t.Errorf("terminate %s: %v", role, err)
		}
		for _, stmt := range []string{"DROP OWNED BY " + ident, "DROP ROLE " + ident} {
			if _, err := pool.Exec(ctx, stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	return role
}

// Configuration the fuzz targets found accepted, or refused without naming
// the flag: each exits 2 naming the flag and its variable, and no password
// is printed. (TestBadConfigurationExits2NamingTheFlag has the rest.)
func TestBadKafkaAndRelayValuesExit2NamingTheFlag(t *testing.T) {
	t.Parallel()
	const password = "sasl-hunter2"
	base := map[string]string{"OUTBOX_DATABASE_URL": "postgres://postgres@127.0.0.1:1/postgres", "OUTBOX_KAFKA_BROKERS": "127.0.0.1:9092"}
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"broker port not a number", map[string]string{"OUTBOX_KAFKA_BROKERS": "kafka:9092x"},
			`--kafka-brokers (OUTBOX_KAFKA_BROKERS): entry 0 ("kafka:9092x") has no valid port`},
		{"broker port out of range", map[string]string{"OUTBOX_KAFKA_BROKERS": "k1:9092,k2:99999"},
			`--kafka-brokers (OUTBOX_KAFKA_BROKERS): entry 1 ("k2:99999") has no valid port`},
		{"unknown partitioner", map[string]string{"OUTBOX_KAFKA_PARTITIONER": "sticky"},
			`--kafka-partitioner (OUTBOX_KAFKA_PARTITIONER): "sticky" is not one of`},
		{"unknown SASL mechanism", map[string]string{"OUTBOX_KAFKA_SASL_MECHANISM": "gssapi", "OUTBOX_KAFKA_SASL_USERNAME": "u", "OUTBOX_KAFKA_SASL_PASSWORD": password},
			`--kafka-sasl-mechanism (OUTBOX_KAFKA_SASL_MECHANISM): "gssapi" is not one of`},
		{"SASL password without mechanism", map[string]string{"OUTBOX_KAFKA_SASL_PASSWORD": password},
			"--kafka-sasl-mechanism (OUTBOX_KAFKA_SASL_MECHANISM): a SASL username or password is set but no mechanism"},
		{"SASL without username", map[string]string{"OUTBOX_KAFKA_SASL_MECHANISM": "plain", "OUTBOX_KAFKA_SASL_PASSWORD": password},
			"--kafka-sasl-username (OUTBOX_KAFKA_SASL_USERNAME): required with a SASL mechanism"},
		{"password SASLprep refuses", map[string]string{"OUTBOX_KAFKA_SASL_MECHANISM": "scram-sha-256", "OUTBOX_KAFKA_SASL_USERNAME": "u", "OUTBOX_KAFKA_SASL_PASSWORD": "bell\a" + password},
			"--kafka-sasl-username (OUTBOX_KAFKA_SASL_USERNAME) or --kafka-sasl-password (OUTBOX_KAFKA_SASL_PASSWORD): username or password is not valid for scram-sha-256"},
		{"replica id not UTF-8", map[string]string{"OUTBOX_RELAY_ID": "relay-\xff"},
			"--relay-id (OUTBOX_RELAY_ID)"},
		{"backoff beyond a day", map[string]string{"OUTBOX_BACKOFF_MAX": "100000h"},
			"--backoff-max (OUTBOX_BACKOFF_MAX): 100000h0m0s is longer than 24h0m0s"},
		{"outage backoff beyond a day", map[string]string{"OUTBOX_OUTAGE_BACKOFF_MAX": "25h"},
			"--outage-backoff-max (OUTBOX_OUTAGE_BACKOFF_MAX): 25h0m0s is longer than 24h0m0s"},
		{"probe interval beyond a minute", map[string]string{"OUTBOX_PROBE_INTERVAL": "2m"},
			"--probe-interval (OUTBOX_PROBE_INTERVAL): 2m0s is not between 1ms and 1m"},
		{"probe interval zero", map[string]string{"OUTBOX_PROBE_INTERVAL": "0s"},
			"--probe-interval (OUTBOX_PROBE_INTERVAL): must be positive"},
		{"malformed number from the environment", map[string]string{"OUTBOX_MAX_ATTEMPTS": "ten"},
			"--max-attempts from OUTBOX_MAX_ATTEMPTS"},
		{"malformed boolean from the environment", map[string]string{"OUTBOX_JANITOR_VACUUM": "sometimes"},
			"--janitor-vacuum from OUTBOX_JANITOR_VACUUM"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range c.env {
				env[k] = v
			}
			code, _, stderr := invoke(context.Background(), env, "run")
			if code != 2 || !strings.Contains(stderr, "relay: invalid value for "+c.want) {
				t.Fatalf("exit %d, want 2 saying %q; stderr:\n%s", code, "invalid value for "+c.want, stderr)
			}
			if strings.Contains(stderr, password) {
				t.Fatalf("stderr leaks the SASL password:\n%s", stderr)
			}
		})
	}
}

// Rows whose topic no writer could produce, one not even UTF-8 (a
// SQL_ASCII database holds it), fail with their reason in the batch that
// claimed them while metrics, tracing and the observe file are on; the
// rest of the batch is sent, the process keeps serving, and /metrics
// counts the rejected rows under the topic "<invalid>", never under their
// topic, and the topics beyond --metrics-max-topics under "<other>". (Before, client_golang panicked on the label "acc.p\xffA": every
// replica that claimed the row died, and its batch stayed processing.)
func TestInvalidTopicsFailWithObserversOn(t *testing.T) {
	t.Parallel()
	pool, table, dbURL := testdb.NewSQLASCII(t)
	ctx := context.Background()
	bad := map[string]string{
		"acc.p\xffA":               "at offset 5 is outside [a-zA-Z0-9._-]",
		"bad topic!":               "byte ' ' at offset 3 is outside [a-zA-Z0-9._-]",
		strings.Repeat("t", 10000): "10000 bytes, longer than 249",
	}
	good := []string{"metrics.a", "metrics.b"}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(topic string) uuid.UUID {
		id := uuid.Must(uuid.NewV7())
		if _, err := tx.Exec(ctx, "INSERT INTO "+table.Ident()+" (id, topic, payload) VALUES ($1, convert_from($2, 'SQL_ASCII'), 'p')", id, []byte(topic)); err != nil {
			t.Fatal(err)
		}
		return id
	}
	goodIDs, badIDs := map[uuid.UUID]bool{}, map[uuid.UUID]string{}
	for topic := range bad { // one batch: good rows before, between and after
		goodIDs[insert(good[len(goodIDs)%2])] = true
		badIDs[insert(topic)] = topic
	}
	goodIDs[insert(good[0])] = true
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var exports atomic.Int32 // OTLP requests: tracing is on
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		exports.Add(1)
	}))
	defer collector.Close()
	p := startRelay(t, map[string]string{
		"OUTBOX_DATABASE_URL": dbURL, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.URL, "OUTBOX_METRICS_MAX_TOPICS": "1",
	}, "run", "--sink", "stdout", "--poll-interval", "20ms", "--log-format", "json",
		"--metrics-addr", "127.0.0.1:0", "--observe-file", filepath.Join(t.TempDir(), "events.jsonl"))
	awaitCond(t, p, 60*time.Second, "every row sent or failed", func() bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status IN ('sent', 'failed')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(goodIDs)+len(badIDs)
	})
	rows, err := pool.Query(ctx, "SELECT id, status, coalesce(last_error, '') FROM "+table.Ident())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		var status, reason string
		if err := rows.Scan(&id, &status, &reason); err != nil {
			t.Fatal(err)
		}
		if topic, isBad := badIDs[id]; isBad {
			if status != "failed" || !strings.HasPrefix(reason, "malformed row: outbox: invalid topic: ") || !strings.Contains(reason, bad[topic]) {
				t.Errorf("topic %.20q: %s, %q; want failed, an invalid topic: %s", topic, status, reason, bad[topic])
			}
		} else if status != "sent" {
			t.Errorf("good row %s: %s (%s)", id, status, reason)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	series := scrape(t, metricsAddr(t, p.stderr))
	sent := map[string]float64{} // outbox_events_total{outcome="sent"} by topic
	for s, v := range series {
		m := regexp.MustCompile(`topic="([^"]*)"`).FindStringSubmatch(s)
		if m == nil {
			continue
		}
		if m[1] != "metrics.a" && m[1] != "metrics.b" && m[1] != "<other>" && m[1] != "<invalid>" {
			t.Errorf("/metrics has %s %v: only the good topics, <other> and <invalid> may be topic labels", s, v)
		}
		if strings.HasPrefix(s, `outbox_events_total{outcome="sent",`) {
			sent[m[1]] = v
		}
	}
	for outcome, want := range map[string]float64{"claimed": 3, "failed": 3, "sent": 0} {
		if got := series[`outbox_events_total{outcome="`+outcome+`",topic="<invalid>"}`]; got != want {
			t.Errorf("outbox_events_total{topic=<invalid>, outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
	// One topic has its own label (OUTBOX_METRICS_MAX_TOPICS=1), the
	// first seen; the other is counted under <other>.
	if a, b := sent["metrics.a"], sent["metrics.b"]; len(sent) != 3 || !(a == 3 && sent["<other>"] == 1 || b == 1 && sent["<other>"] == 3) {
		t.Errorf("outbox_events_total{outcome=sent} by topic = %v, want metrics.a 3 or metrics.b 1, the other under <other>, <invalid> 0", sent)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, syncbuf.Tail(p.stderr.String(), 4000))
	}
	if exports.Load() == 0 {
		t.Errorf("tracing was on but nothing was exported; stderr:\n%s", syncbuf.Tail(p.stderr.String(), 4000))
	}
}

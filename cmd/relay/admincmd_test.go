package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// adminBundle is a migrated table and the environment that names it.
type adminBundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	table outbox.Table
	env   map[string]string
}

func adminSetup(t *testing.T) *adminBundle {
	t.Helper()
	pool, table := testdb.New(t)
	return &adminBundle{ctx: context.Background(), pool: pool, table: table,
		env: map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema, "USER": "tester"}}
}

// put writes n rows of topic with the writer, then sets their state with
// set (SQL after SET; "" leaves them pending), and returns their ids.
func (b *adminBundle) put(t *testing.T, topic string, n int, set string) []string {
	t.Helper()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < n; i++ {
		res, err := w.Write(b.ctx, b.pool, outbox.Message{Topic: topic, Key: []byte("k"), Payload: fmt.Appendf(nil, "%s payload %d", topic, i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID.String())
	}
	if set != "" {
		if _, err := b.pool.Exec(b.ctx, "UPDATE "+b.table.Ident()+" SET "+set+" WHERE id = ANY($1)", ids); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func (b *adminBundle) status(t *testing.T, id string) string {
	t.Helper()
	var st string
	if err := b.pool.QueryRow(b.ctx, "SELECT status FROM "+b.table.Ident()+" WHERE id = $1", id).Scan(&st); err != nil {
		return "gone"
	}
	return st
}

func (b *adminBundle) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM "+b.table.Ident()+" WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *adminBundle) auditRows(t *testing.T) (actions []string, actors []string, rows []int64) {
	t.Helper()
	q, err := b.pool.Query(b.ctx, "SELECT action, actor, row_count FROM "+b.table.Related("audit")+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for q.Next() {
		var a, who string
		var n int64
		if err := q.Scan(&a, &who, &n); err != nil {
			t.Fatal(err)
		}
		actions, actors, rows = append(actions, a), append(actors, who), append(rows, n)
	}
	return actions, actors, rows
}

const failedSet = "status = 'failed', attempt = 10, last_error = 'attempt 10 of 10: broker said no', failed_at = now()"

// relay status prints tables, or JSON that parses into admin.Status, and
// lists a relay run that is connected and holds rows; the database
// password is in neither its output nor its log.
func TestStatusCommand(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	b.put(t, "orders", 3, "")
	b.put(t, "orders", 2, failedSet)
	b.put(t, "payments", 1, "status = 'sent', sent_at = now(), locked_by = 'relay-old#1'")
	b.put(t, "payments", 1, "status = 'processing', locked_by = 'relay-x#4', locked_until = now() + interval '1 minute'")

	url := strings.Replace(testdb.URL(t), "postgres@", "postgres:s3cret-pw@", 1)
	env := map[string]string{"OUTBOX_DATABASE_URL": url, "OUTBOX_SCHEMA": b.table.Schema}
	code, out, stderr := invoke(b.ctx, env, "status", "--log-level", "debug")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{b.table.String() + " at ", "ordered delivery: not in use", "retention job: never ran", "sink outage: unknown", "outbox_sink_outage"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	for _, want := range [][]string{{"pending,", "due", "3"}, {"failed", "2"}, {"sent", "1"}, {"orders", "3", "0", "0", "2"},
		{"payments", "0", "0", "1", "0"}, {"relay-x", "1", "1"}, {"relay-old", "1"}} {
		if !hasLine(out, want...) {
			t.Errorf("status output lacks a line starting %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+stderr, "s3cret-pw") {
		t.Errorf("the password leaked:\n%s%s", out, stderr)
	}

	// A relay running on the table shows as connected.
	runCtx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "stdout", "--relay-id", "status-test-relay", "--poll-interval", "20ms"},
			func(k string) string { return b.env[k] }, &runOut, &runErr)
	}()
	await(t, 10*time.Second, func() bool { return b.count(t, "status = 'sent'") == 4 })
	code, out, stderr = invoke(b.ctx, b.env, "status", "--json", "--exact-sent")
	if code != 0 {
		t.Fatalf("status --json: exit %d\n%s", code, stderr)
	}
	var s admin.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json does not parse: %v\n%s", err, out)
	}
	if s.Table != b.table.String() || s.Totals.PendingDue != 0 || s.Totals.Failed != 2 || s.Totals.Sent == nil || *s.Totals.Sent != 4 || !s.Totals.SentExact {
		t.Errorf("status --json = %+v", s)
	}
	if !slices.ContainsFunc(s.Sessions, func(c admin.Session) bool {
		return c.Relay == "status-test-relay" && c.Connections > 0 && c.ServesTable
	}) {
		t.Errorf("the running relay is not among the sessions: %+v", s.Sessions)
	}
	if !slices.ContainsFunc(s.RecentSenders, func(r admin.Sender) bool { return r.Relay == "status-test-relay" && r.Rows == 3 }) {
		t.Errorf("the running relay is not among the recent senders: %+v", s.RecentSenders)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run: exit %d\n%s", code, runErr.String())
	}
}

// hasLine reports whether a line of out starts with these fields.
func hasLine(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= len(fields) && slices.Equal(f[:len(fields)], fields) {
			return true
		}
	}
	return false
}

func TestFailedListShowAndPages(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	ids := b.put(t, "orders", 5, failedSet)
	other := b.put(t, "payments", 1, "status = 'failed', last_error = 'too large', failed_at = now()")
	b.put(t, "orders", 1, "")

	// Pages of 2 by --after, JSON.
	var walked []string
	after := ""
	for page := 0; page < 5; page++ {
		args := []string{"failed", "list", "--topic", "orders", "--limit", "2", "--json"}
		if after != "" {
			args = append(args, "--after", after)
		}
		code, out, stderr := invoke(b.ctx, b.env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
		var res struct {
			Rows      []admin.FailedRow `json:"rows"`
			NextAfter string            `json:"next_after"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("list --json does not parse: %v\n%s", err, out)
		}
		for _, r := range res.Rows {
			if r.Payload != nil {
				t.Errorf("payload listed without --show-payload: %+v", r)
			}
			walked = append(walked, r.ID)
		}
		if after = res.NextAfter; after == "" {
			break
		}
	}
	if !slices.Equal(walked, ids) {
		t.Errorf("paged list = %v, want %v", walked, ids)
	}

	// The human list, by error text.
	code, out, _ := invoke(b.ctx, b.env, "failed", "list", "--error", "TOO LARGE")
	if code != 0 || !strings.Contains(out, other[0]) || strings.Contains(out, ids[0]) || !strings.Contains(out, "1 row") || strings.Contains(out, "payments payload") {
		t.Errorf("list --error: exit %d\n%s", code, out)
	}
	code, out, _ = invoke(b.ctx, b.env, "failed", "list", "--error", "too large", "--show-payload")
	if code != 0 || !strings.Contains(out, `"payments payload 0"`) {
		t.Errorf("list --show-payload: exit %d\n%s", code, out)
	}
	// A time filter measured back from the database clock.
	code, out, _ = invoke(b.ctx, b.env, "failed", "list", "--failed-after", "1h", "--created-before", "2099-01-01")
	if code != 0 || strings.Count(out, "\n") != 8 {
		t.Errorf("list --failed-after 1h: exit %d\n%s", code, out)
	}
	code, out, _ = invoke(b.ctx, b.env, "failed", "list", "--failed-before", "1h")
	if code != 0 || !strings.Contains(out, "no failed rows match") {
		t.Errorf("list --failed-before 1h: exit %d\n%s", code, out)
	}

	// show: every field; the payload only when asked; an id that is not
	// failed is an error naming it.
	code, out, stderr := invoke(b.ctx, b.env, "failed", "show", ids[0])
	if code != 0 || !strings.Contains(out, "last_error  attempt 10 of 10: broker said no") || !strings.Contains(out, "payload     16 bytes (--show-payload prints it)") || !strings.Contains(out, `key         "k"`) {
		t.Errorf("show: exit %d\n%s%s", code, out, stderr)
	}
	pending := b.put(t, "orders", 1, "")[0]
	code, out, stderr = invoke(b.ctx, b.env, "failed", "show", "--show-payload", ids[1], pending)
	if code != 1 || !strings.Contains(out, `"orders payload 1"`) || !strings.Contains(stderr, "1 id not among the failed rows") || !strings.Contains(stderr, pending) {
		t.Errorf("show with a pending id: exit %d\n%s%s", code, out, stderr)
	}
}

func TestFailedUsageErrors(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOX_DATABASE_URL": "postgres://postgres@127.0.0.1:1/postgres"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"failed"}, "failed needs a subcommand"},
		{[]string{"failed", "fix"}, `unknown failed subcommand "fix"`},
		{[]string{"failed", "retry"}, "relay failed retry needs ids or a filter"},
		{[]string{"failed", "purge", "--all", "--topic", "x"}, "--all (OUTBOX_ALL) is for acting without ids or filters"},
		{[]string{"failed", "list", "not-an-id"}, `"not-an-id" is not an event id`},
		{[]string{"failed", "list", "--dry-run"}, "--dry-run (OUTBOX_DRY_RUN) does not apply to relay failed list"},
		{[]string{"failed", "list", "--failed-after", "yesterday"}, `invalid value for --failed-after (OUTBOX_FAILED_AFTER): "yesterday" is neither a time`},
		{[]string{"failed", "show"}, "relay failed show needs ids"},
		{[]string{"failed", "groups", "--group", "0123456789abcdef"}, "--group (OUTBOX_GROUP) does not apply to relay failed groups"},
		{[]string{"failed", "retry", "--group", "orders"}, `invalid value for --group (OUTBOX_GROUP): "orders" is not a failure group`},
		{[]string{"replay", "--topic", "orders"}, "relay replay needs ids, or --topic and a time range"},
		{[]string{"status", "--timeout", "0s"}, "invalid value for --timeout (OUTBOX_TIMEOUT): must be positive"},
	}
	for _, c := range cases {
		code, _, stderr := invoke(context.Background(), env, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 with %q\n%s", c.args, code, c.want, stderr)
		}
	}
	// Flags come from the environment too.
	code, _, stderr := invoke(context.Background(), map[string]string{"OUTBOX_DATABASE_URL": env["OUTBOX_DATABASE_URL"], "OUTBOX_LIMIT": "-1"}, "failed", "list")
	if code != 2 || !strings.Contains(stderr, "--limit (OUTBOX_LIMIT): must not be negative") {
		t.Errorf("OUTBOX_LIMIT=-1: exit %d\n%s", code, stderr)
	}
}

// retry: a dry run changes nothing; a bulk retry without --yes on a
// standard input that is not a terminal is refused; with --yes it runs,
// is audited under --actor, and a running relay publishes the rows.
func TestFailedRetryThenARelayPublishes(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	ids := b.put(t, "orders", 3, failedSet)
	keep := b.put(t, "payments", 1, failedSet)

	code, out, stderr := invoke(b.ctx, b.env, "failed", "retry", "--topic", "orders", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: would retry 3 failed rows of "+b.table.String()+"; nothing changed") || !strings.Contains(out, ids[2]) {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = invoke(b.ctx, b.env, "failed", "retry", "--topic", "orders", "--dry-run", "--json")
	var dry admin.Result
	if err := json.Unmarshal([]byte(out), &dry); code != 0 || err != nil || !dry.DryRun || dry.Rows != 3 {
		t.Fatalf("dry run --json: exit %d, %v\n%s", code, err, out)
	}
	if n := b.count(t, "status = 'failed'"); n != 4 {
		t.Fatalf("a dry run changed rows: %d failed, want 4", n)
	}
	if a, _, _ := b.auditRows(t); len(a) != 0 {
		t.Fatalf("a dry run left audit entries: %v", a)
	}

	// Not a terminal, no --yes: refused, nothing changed.
	var o, e syncbuf.Buffer
	err := runFailed(b.ctx, []string{"retry", "--topic", "orders"}, func(k string) string { return b.env[k] },
		console{in: strings.NewReader("yes\n"), terminal: false}, &o, &e)
	var ue *errUsage
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "refusing to retry 3 failed rows without confirmation: standard input is not a terminal; add --yes to go ahead") {
		t.Fatalf("retry without --yes on a pipe = %v", err)
	}
	// A terminal that answers no.
	err = runFailed(b.ctx, []string{"retry", "--topic", "orders"}, func(k string) string { return b.env[k] },
		console{in: strings.NewReader("n\n"), terminal: true}, &o, &e)
	if !errors.Is(err, errAborted) || !strings.Contains(e.String(), "Retry 3 failed rows of "+b.table.String()+" (topic orders)? [y/N]") {
		t.Fatalf("retry answered no = %v; prompt:\n%s", err, e.String())
	}
	if n := b.count(t, "status = 'failed'"); n != 4 {
		t.Fatalf("a refused retry changed rows: %d failed, want 4", n)
	}

	// One id, confirmed; a running relay then publishes it.
	runCtx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "stdout", "--poll-interval", "20ms"}, func(k string) string { return b.env[k] }, &runOut, &runErr)
	}()
	code, out, stderr = invoke(b.ctx, b.env, "failed", "retry", "--yes", ids[0])
	if code != 0 || !strings.Contains(out, "retried 1 failed row of "+b.table.String()+" (audit entry ") {
		t.Fatalf("retry one id: exit %d\n%s%s", code, out, stderr)
	}
	await(t, 10*time.Second, func() bool { return strings.Contains(runOut.String(), ids[0]) })

	// The rest with --yes, as JSON, under an actor of our own.
	code, out, stderr = invoke(b.ctx, b.env, "failed", "retry", "--topic", "orders", "--yes", "--json", "--actor", "alice@ops", "--clear-error")
	var res admin.Result
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Rows != 2 || !slices.Equal(res.IDs, ids[1:]) || res.AuditID == 0 {
		t.Fatalf("retry --yes --json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	if !strings.Contains(stderr, "admin action") || !strings.Contains(stderr, "actor=alice@ops") || !strings.Contains(stderr, "rows=2") {
		t.Errorf("the retry was not logged:\n%s", stderr)
	}
	await(t, 10*time.Second, func() bool {
		return strings.Contains(runOut.String(), ids[1]) && strings.Contains(runOut.String(), ids[2])
	})
	await(t, 10*time.Second, func() bool { return b.count(t, "status = 'sent'") == 3 })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run: exit %d\n%s", code, runErr.String())
	}
	if b.status(t, keep[0]) != "failed" || strings.Contains(runOut.String(), keep[0]) {
		t.Errorf("a row of another topic was retried")
	}
	actions, actors, rows := b.auditRows(t)
	if !slices.Equal(actions, []string{"failed.retry", "failed.retry"}) || !slices.Equal(actors, []string{"tester@" + hostname(t), "alice@ops"}) || !slices.Equal(rows, []int64{1, 2}) {
		t.Errorf("audit = %v %v %v", actions, actors, rows)
	}
}

// Text from the table (a topic, a sink's error, a relay's name) that holds
// terminal escape sequences reaches the operator's terminal escaped in
// relay failed list, failed show, a dry run and relay status; --json
// carries it exactly.
func TestAdminOutputEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	const topic, lastError, relayName = "orders\x1b]0;PWNED\x07", "sink said \x1b[2J\u009b31m gone", "relay\x1b[2J"
	id := b.put(t, "orders", 1, "")[0]
	if _, err := b.pool.Exec(b.ctx, "UPDATE "+b.table.Ident()+" SET status = 'failed', topic = $1, last_error = $2, failed_at = now() WHERE id = $3", topic, lastError, id); err != nil {
		t.Fatal(err)
	}
	b.put(t, "payments", 1, "status = 'processing', locked_by = '"+relayName+"#1', locked_until = now() + interval '1 minute'")
	for _, args := range [][]string{{"failed", "list"}, {"failed", "show", id}, {"failed", "groups"}, {"failed", "purge", "--all", "--dry-run"}, {"status"}} {
		code, out, stderr := invoke(b.ctx, b.env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
		if strings.ContainsAny(out, "\x1b\x07\u009b") {
			t.Errorf("%v printed a control character:\n%q", args, out)
		}
		if !strings.Contains(out, `orders\x1b]0;PWNED\a`) {
			t.Errorf("%v does not show the topic escaped:\n%s", args, out)
		}
	}
	code, out, _ := invoke(b.ctx, b.env, "failed", "list", "--json")
	var list struct {
		Rows []admin.FailedRow `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Rows) != 1 || list.Rows[0].Topic != topic || list.Rows[0].LastError != lastError {
		t.Errorf("failed list --json: exit %d, %v, %+v", code, err, list.Rows)
	}
	code, out, _ = invoke(b.ctx, b.env, "status", "--json")
	var s admin.Status
	if err := json.Unmarshal([]byte(out), &s); code != 0 || err != nil || !slices.ContainsFunc(s.Topics, func(tc admin.TopicCounts) bool { return tc.Topic == topic }) ||
		len(s.Holders) != 1 || s.Holders[0].Relay != relayName {
		t.Errorf("status --json: exit %d, %v, %+v", code, err, s)
	}
}

func TestSafeText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain 中文 text":      "plain 中文 text",
		"\x1b]0;PWNED\x07":   `\x1b]0;PWNED\a`,
		"\x1b[2J":            `\x1b[2J`,
		"del\x7f c1\u009b":   `del\x7f c1\u009b`,
		"bidi\u202egnp.exe":  `bidi\u202egnp.exe`,
		"tab\there\nnext":    `tab\there\nnext`,
		"bad \xff\xfe utf-8": `bad \xff\xfe utf-8`,
		"back\\slash":        `back\slash`,
	} {
		if got := safeText(in); got != want {
			t.Errorf("safeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// answerAfter is a terminal's answer to a confirmation, typed after
// meanwhile has run: what changes in the table between the count the
// operator sees and the change.
type answerAfter struct {
	meanwhile func()
	answer    io.Reader
}

func (r *answerAfter) Read(p []byte) (int, error) {
	if r.meanwhile != nil {
		r.meanwhile()
		r.meanwhile = nil
	}
	return r.answer.Read(p)
}

// The count an operator confirms is the most a change touches: rows that
// match by the time it runs are left alone, and the output says how many;
// rows that left the state meanwhile are reported too.
func TestConfirmedCountIsTheLimit(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	getenv := func(k string) string { return b.env[k] }
	ids := b.put(t, "orders", 3, failedSet)
	var more []string
	var o, e syncbuf.Buffer
	con := console{terminal: true, in: &answerAfter{func() { more = b.put(t, "orders", 2, failedSet) }, strings.NewReader("y\n")}}
	err := runFailed(b.ctx, []string{"retry", "--topic", "orders"}, getenv, con, &o, &e)
	if err != nil || !strings.Contains(e.String(), "Retry 3 failed rows") || !strings.Contains(o.String(), "retried 3 failed rows") ||
		!strings.Contains(o.String(), "left alone: 2 failed rows that matched by then, beyond the 3 confirmed") {
		t.Fatalf("retry = %v\n%s%s", err, o.String(), e.String())
	}
	for i, id := range append(ids, more...) {
		if want := map[bool]string{true: "pending", false: "failed"}[i < 3]; b.status(t, id) != want {
			t.Errorf("row %d is %s, want %s", i, b.status(t, id), want)
		}
	}

	// Fewer: another operator retries one of the two rows meanwhile.
	o, e = syncbuf.Buffer{}, syncbuf.Buffer{}
	con = console{terminal: true, in: &answerAfter{func() {
		if _, err := b.pool.Exec(b.ctx, "UPDATE "+b.table.Ident()+" SET status = 'pending' WHERE id = $1", more[0]); err != nil {
			t.Error(err)
		}
	}, strings.NewReader("y\n")}}
	err = runFailed(b.ctx, []string{"purge", "--topic", "orders"}, getenv, con, &o, &e)
	if err != nil || !strings.Contains(e.String(), "Purge 2 failed rows") || !strings.Contains(o.String(), "purged 1 failed row of") ||
		!strings.Contains(o.String(), "not changed: 1 of the 2 rows confirmed, no longer failed") {
		t.Fatalf("purge = %v\n%s%s", err, o.String(), e.String())
	}

	// replay: a row sent meanwhile in the range is left alone.
	sent := b.put(t, "payments", 2, "status = 'sent', sent_at = now() - interval '10 minutes'")
	o, e = syncbuf.Buffer{}, syncbuf.Buffer{}
	var late []string
	con = console{terminal: true, in: &answerAfter{func() {
		late = b.put(t, "payments", 1, "status = 'sent', sent_at = now() - interval '5 minutes'")
	}, strings.NewReader("yes\n")}}
	err = runReplay(b.ctx, []string{"--topic", "payments", "--sent-after", "1h"}, getenv, con, &o, &e)
	if err != nil || !strings.Contains(o.String(), "replayed 2 sent rows") || !strings.Contains(o.String(), "left alone: 1 sent row that matched by then, beyond the 2 confirmed") {
		t.Fatalf("replay = %v\n%s%s", err, o.String(), e.String())
	}
	if b.status(t, sent[0]) != "pending" || b.status(t, sent[1]) != "pending" || b.status(t, late[0]) != "sent" {
		t.Errorf("after the replay: %s %s %s", b.status(t, sent[0]), b.status(t, sent[1]), b.status(t, late[0]))
	}
}

// relay failed groups prints the failure groups; retry --group changes
// only that group's rows, at most as many as confirmed.
func TestFailedGroupsAndRetryByGroup(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	getenv := func(k string) string { return b.env[k] }
	const refused = "status = 'failed', failed_at = now(), last_error = 'permanent: webhook: event ' || id::text || ': 400 Bad Request'"
	ids := b.put(t, "orders", 3, refused)
	other := b.put(t, "payments", 1, refused)

	code, out, stderr := invoke(b.ctx, b.env, "failed", "groups", "--json")
	var res struct {
		Groups []admin.FailureGroup `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || len(res.Groups) != 2 || res.Groups[0].Count != 3 || res.Groups[0].Topic != "orders" {
		t.Fatalf("groups --json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	fp := res.Groups[0].Fingerprint
	code, out, _ = invoke(b.ctx, b.env, "failed", "groups")
	if code != 0 || !strings.Contains(out, "PATTERN") || !strings.Contains(out, "permanent: webhook: event <id>: <n> Bad Request") ||
		!regexp.MustCompile(fp+`\s+3\s+orders\s`).MatchString(out) || !strings.Contains(out, "2 groups") {
		t.Errorf("groups: exit %d\n%s", code, out)
	}

	// A row of the group fails while the operator reads the count: it is
	// left alone, and said so.
	var o, e syncbuf.Buffer
	var late []string
	con := console{terminal: true, in: &answerAfter{func() { late = b.put(t, "orders", 1, refused) }, strings.NewReader("y\n")}}
	err := runFailed(b.ctx, []string{"retry", "--group", fp}, getenv, con, &o, &e)
	if err != nil || !strings.Contains(e.String(), "Retry 3 failed rows") || !strings.Contains(e.String(), "failure group "+fp) ||
		!strings.Contains(o.String(), "retried 3 failed rows") || !strings.Contains(o.String(), "left alone: 1 failed row that matched by then") {
		t.Fatalf("retry --group = %v\n%s%s", err, o.String(), e.String())
	}
	for i, id := range append(append(ids, late...), other...) {
		if want := map[bool]string{true: "pending", false: "failed"}[i < 3]; b.status(t, id) != want {
			t.Errorf("row %d is %s, want %s", i, b.status(t, id), want)
		}
	}
	code, out, stderr = invoke(b.ctx, b.env, "failed", "purge", "--group", fp, "--yes")
	if code != 0 || !strings.Contains(out, "purged 1 failed row") || b.status(t, late[0]) != "gone" || b.status(t, other[0]) != "failed" {
		t.Errorf("purge --group: exit %d\n%s%s", code, out, stderr)
	}
}

// OUTBOX_YES in the environment confirms nothing, and a change of one id
// asks too: only --yes on the command line goes ahead without a terminal.
func TestYesOnlyFromTheCommandLine(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	ids := b.put(t, "orders", 2, failedSet)
	sent := b.put(t, "payments", 1, "status = 'sent', sent_at = now()")
	getenv := func(k string) string {
		if k == "OUTBOX_YES" {
			return "1"
		}
		return b.env[k]
	}
	pipe := console{in: strings.NewReader("y\n"), terminal: false}
	for _, c := range []struct {
		args []string
		run  func(context.Context, []string, func(string) string, console, io.Writer, io.Writer) error
	}{
		{[]string{"retry", "--topic", "orders"}, runFailed},
		{[]string{"purge", ids[0]}, runFailed},
		{[]string{sent[0]}, runReplay},
	} {
		var o, e syncbuf.Buffer
		err := c.run(b.ctx, c.args, getenv, pipe, &o, &e)
		var ue *errUsage
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "without confirmation: standard input is not a terminal; add --yes to go ahead") {
			t.Errorf("%v with OUTBOX_YES=1 = %v, want a refusal", c.args, err)
		}
	}
	if n := b.count(t, "status = 'failed'"); n != 2 || b.status(t, sent[0]) != "sent" {
		t.Fatalf("a refused change changed rows: %d failed, the sent row %s", n, b.status(t, sent[0]))
	}
	var o, e syncbuf.Buffer
	if err := runFailed(b.ctx, []string{"purge", ids[0], "--yes"}, getenv, pipe, &o, &e); err != nil || !strings.Contains(o.String(), "purged 1 failed row") {
		t.Errorf("purge --yes = %v\n%s%s", err, o.String(), e.String())
	}
	if _, out, _ := invoke(b.ctx, nil, "failed", "--help"); !strings.Contains(out, "--yes [command line only]") {
		t.Errorf("the help does not say --yes is read from the command line only:\n%s", out)
	}
}

func hostname(t *testing.T) string {
	t.Helper()
	h := defaultActor(func(string) string { return "x" })
	return strings.TrimPrefix(h, "x@")
}

// purge on a terminal asks, and deletes only failed rows of the filter.
func TestFailedPurgeAsksOnTheTerminal(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	ids := b.put(t, "orders", 2, failedSet)
	pending := b.put(t, "orders", 1, "")
	var o, e syncbuf.Buffer
	err := runFailed(b.ctx, []string{"purge", "--topic", "orders", "--log-level", "warn"}, func(k string) string { return b.env[k] },
		console{in: strings.NewReader("yes\n"), terminal: true}, &o, &e)
	if err != nil || !strings.Contains(o.String(), "purged 2 failed rows of "+b.table.String()) {
		t.Fatalf("purge answered yes = %v\n%s%s", err, o.String(), e.String())
	}
	for _, id := range ids {
		if st := b.status(t, id); st != "gone" {
			t.Errorf("%s is %s after purge", id, st)
		}
	}
	if st := b.status(t, pending[0]); st != "pending" {
		t.Errorf("a pending row of the topic was touched: %s", st)
	}
}

// The compiled binary, its standard input not a terminal (/dev/null),
// refuses a bulk change without --yes and changes nothing.
func TestBinaryRefusesBulkChangeWithoutATerminal(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	b.put(t, "orders", 2, failedSet)
	cmd := exec.Command(buildBinary(t), "failed", "purge", "--topic", "orders")
	cmd.Env = []string{"OUTBOX_DATABASE_URL=" + b.env["OUTBOX_DATABASE_URL"], "OUTBOX_SCHEMA=" + b.table.Schema, "USER=tester"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "refusing to purge 2 failed rows without confirmation: standard input is not a terminal") {
		t.Fatalf("exit %v\n%s", err, out)
	}
	if n := b.count(t, "status = 'failed'"); n != 2 {
		t.Fatalf("%d failed rows left, want 2", n)
	}
}

// replay: ids that retention deleted fail the whole replay, naming them;
// by topic and time range with --yes, the rows go back to pending with
// their ids and a running relay publishes them again.
func TestReplayCommand(t *testing.T) {
	t.Parallel()
	b := adminSetup(t)
	sent := b.put(t, "orders", 3, "status = 'sent', sent_at = now() - interval '10 minutes', locked_by = 'relay-a#1'")
	old := b.put(t, "orders", 1, "status = 'sent', sent_at = now() - interval '3 hours', locked_by = 'relay-a#1'")
	gone := []string{uuid.NewString(), uuid.NewString()}

	code, out, stderr := invoke(b.ctx, b.env, "replay", "--yes", sent[0], gone[0], gone[1])
	if code != 1 || !strings.Contains(stderr, "2 ids are not in the table (deleted by retention, or never written), so nothing was replayed") ||
		!strings.Contains(stderr, gone[0]) || !strings.Contains(stderr, gone[1]) {
		t.Fatalf("replay of deleted ids: exit %d\n%s%s", code, out, stderr)
	}
	// Without --yes off a terminal, the deleted ids are still what it says.
	var o, e syncbuf.Buffer
	err := runReplay(b.ctx, []string{sent[0], gone[0]}, func(k string) string { return b.env[k] }, console{in: strings.NewReader(""), terminal: false}, &o, &e)
	if !errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), "1 id is not in the table") {
		t.Errorf("replay of a deleted id without --yes = %v", err)
	}
	code, out, _ = invoke(b.ctx, b.env, "replay", "--yes", "--json", sent[0], gone[0])
	var nf struct {
		NotFound []string `json:"not_found"`
	}
	if err := json.Unmarshal([]byte(out), &nf); code != 1 || err != nil || !slices.Equal(nf.NotFound, gone[:1]) {
		t.Errorf("replay --json of a deleted id: exit %d, %v\n%s", code, err, out)
	}
	if b.status(t, sent[0]) != "sent" {
		t.Fatal("a refused replay changed a row")
	}

	code, out, _ = invoke(b.ctx, b.env, "replay", "--topic", "orders", "--sent-after", "1h", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: would replay 3 sent rows") {
		t.Fatalf("replay --dry-run: exit %d\n%s", code, out)
	}
	if n := b.count(t, "status = 'sent'"); n != 4 {
		t.Fatalf("a dry run changed rows: %d sent", n)
	}

	runCtx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "stdout", "--poll-interval", "20ms"}, func(k string) string { return b.env[k] }, &runOut, &runErr)
	}()
	code, out, stderr = invoke(b.ctx, b.env, "replay", "--topic", "orders", "--sent-after", "1h", "--yes", "--json")
	var res admin.Result
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || !slices.Equal(res.IDs, sent) {
		t.Fatalf("replay --yes --json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	await(t, 10*time.Second, func() bool {
		for _, id := range sent {
			if !strings.Contains(runOut.String(), id) {
				return false
			}
		}
		return true
	})
	await(t, 10*time.Second, func() bool { return b.count(t, "status = 'sent'") == 4 })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run: exit %d\n%s", code, runErr.String())
	}
	if strings.Contains(runOut.String(), old[0]) {
		t.Error("a row sent before the range was replayed")
	}
	actions, _, rows := b.auditRows(t)
	if !slices.Equal(actions, []string{"replay"}) || !slices.Equal(rows, []int64{3}) {
		t.Errorf("audit = %v %v", actions, rows)
	}
}

func TestInterleave(t *testing.T) {
	t.Parallel()
	f := newFlags("x", "", nil, func(string) string { return "" })
	var b bool
	var s string
	f.Bool(&b, "yes", false, "")
	f.String(&s, "topic", "", "")
	cases := []struct{ in, want []string }{
		{[]string{"a", "--yes", "b"}, []string{"--yes", "--", "a", "b"}},
		{[]string{"--topic", "t", "a"}, []string{"--topic", "t", "--", "a"}},
		{[]string{"a", "--topic=t"}, []string{"--topic=t", "--", "a"}},
		{[]string{"--yes"}, []string{"--yes"}},
		{[]string{"a", "--", "--yes"}, []string{"--", "a", "--yes"}},
	}
	for _, c := range cases {
		if got := interleave(f, c.in); !slices.Equal(got, c.want) {
			t.Errorf("interleave(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Time
	}{
		{"2h", now.Add(-2 * time.Hour)},
		{"2026-04-30T10:00:00Z", time.Date(2026, 4, 30, 10, 0, 0, 0, time.UTC)},
		{"2026-04-30", time.Date(2026, 4, 30, 0, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		var w whenFlag
		at, ago, err := parseWhen(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		w.raw, w.at, w.ago = c.in, at, ago
		if got := w.resolve(now); !got.Equal(c.want) {
			t.Errorf("%s = %v, want %v", c.in, got, c.want)
		}
	}
	if _, _, err := parseWhen("-2h"); err == nil {
		t.Error("a negative duration parsed")
	}
}

// A relay records when it fails a row (failed_at, migration 007), in both
// claim modes, so that relay failed can filter by it.
func TestRelayRecordsWhenARowFailed(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"lease", "lock"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			b := adminSetup(t)
			bad := b.put(t, "orders", 1, `headers = '[1, 2]'`)
			runCtx, cancel := context.WithCancel(b.ctx)
			defer cancel()
			var runOut, runErr syncbuf.Buffer
			done := make(chan int)
			go func() {
				done <- run(runCtx, []string{"run", "--sink", "stdout", "--poll-interval", "20ms", "--claim-mode", mode},
					func(k string) string { return b.env[k] }, &runOut, &runErr)
			}()
			await(t, 10*time.Second, func() bool { return b.status(t, bad[0]) == "failed" })
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("relay run: exit %d\n%s", code, runErr.String())
			}
			code, out, stderr := invoke(b.ctx, b.env, "failed", "list", "--failed-after", "1m", "--error", "malformed row", "--json")
			var res struct {
				Rows []admin.FailedRow `json:"rows"`
			}
			if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || len(res.Rows) != 1 || res.Rows[0].ID != bad[0] ||
				res.Rows[0].FailedAt == nil || time.Since(*res.Rows[0].FailedAt) > time.Minute {
				t.Fatalf("failed list --failed-after 1m: exit %d, %v\n%s%s", code, err, out, stderr)
			}
		})
	}
}

// relay migrate up --partition-interval creates a partitioned table, a
// second run leaves it as it is, the same flag on an unpartitioned table
// is refused naming the reason, and relay status lists the partitions.
func TestMigratePartitionedAndStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, table := testdb.NewEmpty(t)
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema}
	code, out, stderr := invoke(ctx, env, "migrate", "up", "--partition-interval", "1h")
	if code != 0 || !strings.Contains(out, "created "+table.String()+" partitioned by 1h0m0s") {
		t.Fatalf("migrate up --partition-interval: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr = invoke(ctx, env, "migrate", "up", "--partition-interval", "1h"); code != 0 || !strings.Contains(out, "up to date") {
		t.Errorf("second migrate up: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = invoke(ctx, env, "status")
	if code != 0 || !strings.Contains(out, "partitions: ") || !strings.Contains(out, "\noutbox_p") || !hasLine(out, "outbox_default", "default") ||
		!strings.Contains(out, "partitions job: never ran") {
		t.Errorf("status of a partitioned table: exit %d\n%s%s", code, out, stderr)
	}

	env["OUTBOX_TABLE"] = "plain"
	if code, out, stderr = invoke(ctx, env, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = invoke(ctx, env, "migrate", "up", "--partition-interval", "24h")
	if code == 0 || !strings.Contains(stderr, "cannot partition it in place") {
		t.Errorf("migrate up --partition-interval on an unpartitioned table: exit %d\n%s%s", code, out, stderr)
	}
}

// relay migrate up --ordered prepares the table for ordered delivery:
// every partition's primary key at fillfactor 50, said once per key; a
// second run says it is prepared and changes nothing.
func TestMigrateUpOrdered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.NewEmpty(t)
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema}
	code, out, stderr := invoke(ctx, env, "migrate", "up", "--partition-interval", "1h", "--ordered")
	if code != 0 || !strings.Contains(out, "applied 011_key_fillfactor_default") ||
		!strings.Contains(out, "prepared \""+table.Schema+"\".\"outbox_default_pkey\" for ordered delivery: fillfactor 50") {
		t.Fatalf("migrate up --ordered: exit %d\n%s%s", code, out, stderr)
	}
	var half, all int
	err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE i.reloptions @> '{fillfactor=50}'), count(*)
FROM pg_partition_tree($1::regclass) AS t
JOIN pg_constraint AS c ON c.conrelid = t.relid AND c.contype = 'p'
JOIN pg_class AS i ON i.oid = c.conindid AND i.relkind = 'i'`, table.Ident()).Scan(&half, &all)
	if err != nil || half != all || all < 2 || strings.Count(out, "for ordered delivery: fillfactor 50") != all {
		t.Errorf("%d of %d partitions' keys at fillfactor 50 (%v), want all, each said:\n%s", half, all, err, out)
	}
	code, out, stderr = invoke(ctx, env, "migrate", "up", "--ordered")
	if code != 0 || !strings.Contains(out, "up to date") || !strings.Contains(out, table.String()+" is prepared for ordered delivery") {
		t.Errorf("second migrate up --ordered: exit %d\n%s%s", code, out, stderr)
	}
}

// myAdminBundle is a migrated table in a fresh MariaDB database and the
// environment that names it by a mysql:// URL.
type myAdminBundle struct {
	ctx  context.Context
	db   *sql.DB
	name string // the database
	env  map[string]string
}

func myAdminSetup(t *testing.T) *myAdminBundle {
	t.Helper()
	db, url, name := mysqlURL(t)
	ctx := context.Background()
	if _, err := migrations.UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	return &myAdminBundle{ctx: ctx, db: db, name: name, env: map[string]string{"OUTBOX_DATABASE_URL": url, "USER": "tester"}}
}

// put writes n rows of topic through outbox.FromMySQL, then sets their
// state with set (SQL after SET; "" leaves them pending), and returns
// their ids in id order.
func (b *myAdminBundle) put(t *testing.T, topic string, n int, set string) []string {
	t.Helper()
	var ids []string
	for id := range writeMySQL(t, b.db, outbox.Table{}, topic, n) {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if set != "" {
		for _, id := range ids {
			u := uuid.MustParse(id)
			if _, err := b.db.ExecContext(b.ctx, "UPDATE outbox SET "+set+" WHERE id = ?", u[:]); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

func (b *myAdminBundle) status(t *testing.T, id string) string {
	t.Helper()
	u := uuid.MustParse(id)
	var st string
	err := b.db.QueryRowContext(b.ctx, "SELECT status FROM outbox WHERE id = ?", u[:]).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "gone"
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (b *myAdminBundle) auditRows(t *testing.T) (actions, actors []string, rows []int64) {
	t.Helper()
	q, err := b.db.QueryContext(b.ctx, "SELECT action, actor, row_count FROM outbox_audit ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for q.Next() {
		var a, who string
		var n int64
		if err := q.Scan(&a, &who, &n); err != nil {
			t.Fatal(err)
		}
		actions, actors, rows = append(actions, a), append(actors, who), append(rows, n)
	}
	return actions, actors, rows
}

const myFailedSet = "status = 'failed', attempt = 10, last_error = 'attempt 10 of 10: broker said no', failed_at = UTC_TIMESTAMP(6)"

// A value spliced into the SQL text under gbk can close its string (the
// driver's backslash before the quote becomes part of a gbk character):
// a mysql:// URL with charset=gbk is refused before anything connects,
// naming the fix, and without it the value finds its row.
func TestMySQLUnsafeCharsetRefused(t *testing.T) {
	t.Parallel()
	b := myAdminSetup(t)
	id := b.put(t, "orders", 1, "")[0]
	u := uuid.MustParse(id)
	if _, err := b.db.ExecContext(b.ctx, "UPDATE outbox SET status = 'failed', last_error = ? WHERE id = ?", "sink said 中'x", u[:]); err != nil {
		t.Fatal(err)
	}
	gbk := map[string]string{"OUTBOX_DATABASE_URL": b.env["OUTBOX_DATABASE_URL"] + "?charset=gbk", "USER": "tester"}
	code, out, stderr := invoke(b.ctx, gbk, "failed", "list", "--error", "中'x")
	if code != 2 || !strings.Contains(stderr, "charset=gbk") || !strings.Contains(stderr, "interpolateParams=false") {
		t.Errorf("failed list under charset=gbk: exit %d, want 2 naming the charset\n%s%s", code, out, stderr)
	}
	code, out, stderr = invoke(b.ctx, b.env, "failed", "list", "--error", "中'x")
	if code != 0 || !strings.Contains(out, id) {
		t.Errorf("failed list: exit %d\n%s%s", code, out, stderr)
	}
}

// relay status on a mysql:// URL: the same tables as on PostgreSQL, less
// the sessions (it says why) and ordered delivery; JSON that parses.
func TestMySQLStatusCommand(t *testing.T) {
	t.Parallel()
	b := myAdminSetup(t)
	b.put(t, "orders", 3, "")
	b.put(t, "orders", 2, myFailedSet)
	b.put(t, "payments", 1, "status = 'sent', sent_at = UTC_TIMESTAMP(6), locked_by = 'relay-old#1'")
	b.put(t, "payments", 1, "status = 'processing', locked_by = 'relay-x#4', locked_until = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE")

	code, out, stderr := invoke(b.ctx, b.env, "status")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{b.name + ".outbox at ", "relays connected: not listed: relay run names its sessions by the program_name connection attribute", "retention job: never ran", "sink outage: unknown"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ordered delivery") {
		t.Errorf("status on MySQL speaks of ordered delivery:\n%s", out)
	}
	for _, want := range [][]string{{"pending,", "due", "3"}, {"failed", "2"}, {"orders", "3", "0", "0", "2"},
		{"payments", "0", "0", "1", "0"}, {"relay-x", "1", "1"}, {"relay-old", "1"}} {
		if !hasLine(out, want...) {
			t.Errorf("status output lacks a line starting %q:\n%s", want, out)
		}
	}
	code, out, stderr = invoke(b.ctx, b.env, "status", "--json", "--exact-sent")
	if code != 0 {
		t.Fatalf("status --json: exit %d\n%s", code, stderr)
	}
	var s admin.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json does not parse: %v\n%s", err, out)
	}
	if s.Table != b.name+".outbox" || s.Dialect != "mysql" || s.Totals.PendingDue != 3 || s.Totals.Failed != 2 || s.Totals.Processing != 1 ||
		s.Totals.Sent == nil || *s.Totals.Sent != 1 || !s.Totals.SentExact || s.SessionsNote == "" || len(s.Holders) != 1 {
		t.Errorf("status --json = %+v", s)
	}
}

// On a server with the performance schema on, relay status lists a relay
// run on MySQL as connected and sending, by its program_name.
func TestMySQLStatusCommandListsARunningRelay(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Private(t, "--performance-schema=ON")
	db, dsn := srv.DB(t)
	cfg, err := mysqldsn.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := migrations.UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OUTBOX_DATABASE_URL": mysqldsn.URL(cfg), "USER": "tester"}
	ids := writeMySQL(t, db, outbox.Table{}, "orders", 3)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "stdout", "--relay-id", "my-status-relay", "--poll-interval", "20ms"},
			func(k string) string { return env[k] }, &runOut, &runErr)
	}()
	await(t, 15*time.Second, func() bool { return countMySQL(t, db, "outbox", "sent") == len(ids) })
	code, out, stderr := invoke(ctx, env, "status", "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d\n%s", code, stderr)
	}
	var s admin.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json does not parse: %v\n%s", err, out)
	}
	if s.SessionsNote != "" || !slices.ContainsFunc(s.Sessions, func(c admin.Session) bool {
		return c.Relay == "my-status-relay" && c.Connections > 0 && c.ServesTable && c.Clients == "127.0.0.1"
	}) {
		t.Errorf("the running relay is not among the sessions: %+v (note %q)", s.Sessions, s.SessionsNote)
	}
	if slices.ContainsFunc(s.Sessions, func(c admin.Session) bool { return strings.Contains(c.Relay, "admin") }) {
		t.Errorf("the admin command's own session is listed as a relay: %+v", s.Sessions)
	}
	if !slices.ContainsFunc(s.RecentSenders, func(r admin.Sender) bool { return r.Relay == "my-status-relay" && r.Rows == 3 }) {
		t.Errorf("the running relay is not among the recent senders: %+v", s.RecentSenders)
	}
	code, out, _ = invoke(ctx, env, "status")
	sessionLine := slices.ContainsFunc(strings.Split(out, "\n"), func(line string) bool {
		f := strings.Fields(line)
		return len(f) == 5 && f[0] == "my-status-relay" && f[2] == "-" && f[3] == "127.0.0.1" && f[4] == "yes"
	})
	if code != 0 || !sessionLine {
		t.Errorf("status: exit %d, no session line for the relay:\n%s", code, out)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run: exit %d\n%s", code, runErr.String())
	}
}

// relay failed on a mysql:// URL: list pages without payloads, show,
// a dry run, a bulk retry refused off a terminal and run with --yes
// (audited; a running relay publishes the rows), purge.
func TestMySQLFailedCommand(t *testing.T) {
	t.Parallel()
	b := myAdminSetup(t)
	ids := b.put(t, "orders", 3, myFailedSet)
	other := b.put(t, "payments", 1, "status = 'failed', last_error = 'too large', failed_at = UTC_TIMESTAMP(6)")

	var walked []string
	after := ""
	for page := 0; page < 5; page++ {
		args := []string{"failed", "list", "--topic", "orders", "--limit", "2", "--json"}
		if after != "" {
			args = append(args, "--after", after)
		}
		code, out, stderr := invoke(b.ctx, b.env, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
		var res struct {
			Rows      []admin.FailedRow `json:"rows"`
			NextAfter string            `json:"next_after"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("list --json does not parse: %v\n%s", err, out)
		}
		for _, r := range res.Rows {
			if r.Payload != nil || r.PayloadSize == 0 {
				t.Errorf("payload listed without --show-payload, or no size: %+v", r)
			}
			walked = append(walked, r.ID)
		}
		if after = res.NextAfter; after == "" {
			break
		}
	}
	if !slices.Equal(walked, ids) {
		t.Errorf("paged list = %v, want %v", walked, ids)
	}
	code, out, _ := invoke(b.ctx, b.env, "failed", "list", "--error", "TOO LARGE", "--failed-after", "1h", "--show-payload")
	if code != 0 || !strings.Contains(out, other[0]) || strings.Contains(out, ids[0]) || !strings.Contains(out, `"event-0"`) || !strings.Contains(out, "1 row") {
		t.Errorf("list --error --show-payload: exit %d\n%s", code, out)
	}
	code, out, stderr := invoke(b.ctx, b.env, "failed", "show", ids[0])
	if code != 0 || !strings.Contains(out, "last_error  attempt 10 of 10: broker said no") || !strings.Contains(out, "payload     7 bytes (--show-payload prints it)") {
		t.Errorf("show: exit %d\n%s%s", code, out, stderr)
	}

	code, out, stderr = invoke(b.ctx, b.env, "failed", "retry", "--topic", "orders", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: would retry 3 failed rows of "+b.name+".outbox; nothing changed") || !strings.Contains(out, ids[2]) {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, stderr)
	}
	var o, e syncbuf.Buffer
	err := runFailed(b.ctx, []string{"retry", "--topic", "orders"}, func(k string) string { return b.env[k] },
		console{in: strings.NewReader("yes\n"), terminal: false}, &o, &e)
	var ue *errUsage
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "refusing to retry 3 failed rows without confirmation") {
		t.Fatalf("retry without --yes on a pipe = %v", err)
	}
	if a, _, _ := b.auditRows(t); len(a) != 0 || b.status(t, ids[0]) != "failed" {
		t.Fatalf("a dry run or a refused retry changed something: audit %v, %s", a, b.status(t, ids[0]))
	}

	runCtx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var runOut, runErr syncbuf.Buffer
	done := make(chan int)
	go func() {
		done <- run(runCtx, []string{"run", "--sink", "stdout", "--poll-interval", "20ms"}, func(k string) string { return b.env[k] }, &runOut, &runErr)
	}()
	code, out, stderr = invoke(b.ctx, b.env, "failed", "retry", "--topic", "orders", "--yes", "--json", "--actor", "alice@ops")
	var res admin.Result
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Rows != 3 || !slices.Equal(res.IDs, ids) || res.AuditID == 0 {
		t.Fatalf("retry --yes --json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	if !strings.Contains(stderr, "admin action") || !strings.Contains(stderr, "actor=alice@ops") || !strings.Contains(stderr, "rows=3") {
		t.Errorf("the retry was not logged:\n%s", stderr)
	}
	await(t, 15*time.Second, func() bool {
		for _, id := range ids {
			if b.status(t, id) != "sent" || !strings.Contains(runOut.String(), id) {
				return false
			}
		}
		return true
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay run: exit %d\n%s", code, runErr.String())
	}
	if b.status(t, other[0]) != "failed" {
		t.Errorf("a row of another topic was retried")
	}

	code, out, stderr = invoke(b.ctx, b.env, "failed", "purge", "--yes", other[0])
	if code != 0 || !strings.Contains(out, "purged 1 failed row of "+b.name+".outbox (audit entry ") || b.status(t, other[0]) != "gone" {
		t.Fatalf("purge one id: exit %d\n%s%s", code, out, stderr)
	}
	actions, actors, rows := b.auditRows(t)
	if !slices.Equal(actions, []string{"failed.retry", "failed.purge"}) || !slices.Equal(actors, []string{"alice@ops", "tester@" + hostname(t)}) || !slices.Equal(rows, []int64{3, 1}) {
		t.Errorf("audit = %v %v %v", actions, actors, rows)
	}
}

// relay replay on a mysql:// URL: ids retention deleted fail the whole
// replay, naming them; by topic and time range with --yes the rows go
// back to pending with their ids, audited.
func TestMySQLReplayCommand(t *testing.T) {
	t.Parallel()
	b := myAdminSetup(t)
	sent := b.put(t, "orders", 3, "status = 'sent', sent_at = UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE, locked_by = 'relay-a#1'")
	old := b.put(t, "orders", 1, "status = 'sent', sent_at = UTC_TIMESTAMP(6) - INTERVAL 3 HOUR, locked_by = 'relay-a#1'")
	gone := []string{uuid.NewString(), uuid.NewString()}

	code, out, stderr := invoke(b.ctx, b.env, "replay", "--yes", sent[0], gone[0], gone[1])
	if code != 1 || !strings.Contains(stderr, "2 ids are not in the table (deleted by retention, or never written), so nothing was replayed") ||
		!strings.Contains(stderr, gone[0]) || !strings.Contains(stderr, gone[1]) {
		t.Fatalf("replay of deleted ids: exit %d\n%s%s", code, out, stderr)
	}
	if b.status(t, sent[0]) != "sent" {
		t.Fatal("a refused replay changed a row")
	}
	code, out, _ = invoke(b.ctx, b.env, "replay", "--topic", "orders", "--sent-after", "1h", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: would replay 3 sent rows of "+b.name+".outbox") {
		t.Fatalf("replay --dry-run: exit %d\n%s", code, out)
	}
	code, out, stderr = invoke(b.ctx, b.env, "replay", "--topic", "orders", "--sent-after", "1h", "--yes", "--json")
	var res admin.Result
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || !slices.Equal(res.IDs, sent) || res.Ordered {
		t.Fatalf("replay --yes --json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	for _, id := range sent {
		if st := b.status(t, id); st != "pending" {
			t.Errorf("replayed %s is %s", id, st)
		}
	}
	if st := b.status(t, old[0]); st != "sent" {
		t.Errorf("a row sent before the range was replayed: %s", st)
	}
	actions, _, rows := b.auditRows(t)
	if !slices.Equal(actions, []string{"replay"}) || !slices.Equal(rows, []int64{3}) {
		t.Errorf("audit = %v %v", actions, rows)
	}
}

// relay migrate up|status|down --inbox migrates the inbox table (named
// inbox unless --table says otherwise), apart from the outbox table.
func TestMigrateInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, table := testdb.NewEmpty(t)
	env := map[string]string{"OUTBOX_DATABASE_URL": testdb.URL(t), "OUTBOX_SCHEMA": table.Schema}
	inbox := table.Schema + ".inbox"
	for _, step := range []struct{ args, want string }{
		{"up", "applied 001_create_inbox to " + inbox},
		{"up", inbox + " is up to date"},
		{"status", "001_create_inbox"},
		{"down", "reverted 001_create_inbox of " + inbox},
	} {
		code, out, stderr := invoke(ctx, env, "migrate", step.args, "--inbox")
		if code != 0 || !strings.Contains(out, step.want) {
			t.Fatalf("migrate %s --inbox: exit %d, want %q\n%s%s", step.args, code, step.want, out, stderr)
		}
	}
	code, out, stderr := invoke(ctx, env, "migrate", "up", "--inbox", "--ordered")
	if code != 2 || !strings.Contains(stderr, "--ordered") {
		t.Errorf("migrate up --inbox --ordered: exit %d, want a usage error\n%s%s", code, out, stderr)
	}
}

package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// bundle is a migrated table, an Admin on it and its log.
type bundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	table outbox.Table
	adm   *admin.Admin
	log   *syncbuf.Buffer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool, table := testdb.New(t)
	var log syncbuf.Buffer
	adm, err := admin.New(pool, admin.Config{Table: table, Actor: "ops@test",
		Logger: slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{ctx: context.Background(), pool: pool, table: table, adm: adm, log: &log}
}

// row is an outbox row to put in the table; times are offsets from the
// database clock (negative: in the past), nil: NULL.
type row struct {
	topic, status, lockedBy, lastError string
	key                                []byte
	attempt                            int
	due, lockedUntil, created, sent    *time.Duration
	failed                             *time.Duration
}

func ago(d time.Duration) *time.Duration { d = -d; return &d }
func in(d time.Duration) *time.Duration  { return &d }

// put inserts rows and returns their ids, in order: ids grow with each
// row, as the writer's UUIDv7 do.
func (b *bundle) put(t *testing.T, rows ...row) []string {
	t.Helper()
	var ids []string
	for i, r := range rows {
		id := uuid.Must(uuid.NewV7()).String()
		at := func(d *time.Duration) any {
			if d == nil {
				return nil
			}
			return d.Milliseconds()
		}
		created := r.created
		if created == nil {
			created = in(0)
		}
		due := r.due
		if due == nil {
			due = in(0)
		}
		status := r.status
		if status == "" {
			status = "pending"
		}
		var lockedBy, lastError any
		if r.lockedBy != "" {
			lockedBy = r.lockedBy
		}
		if r.lastError != "" {
			lastError = r.lastError
		}
		_, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table.Ident()+`
			(id, topic, key, payload, headers, status, attempt, next_retry_at, locked_by, locked_until, last_error, created_at, sent_at, failed_at)
			VALUES ($1, $2, $3, $4, '{"h": "v"}', $5, $6,
				now() + $7 * interval '1 ms', $8, now() + $9 * interval '1 ms', $10,
				now() + $11 * interval '1 ms', now() + $12 * interval '1 ms', now() + $13 * interval '1 ms')`,
			id, r.topic, r.key, fmt.Appendf(nil, "payload %d", i), status, r.attempt,
			at(due), lockedBy, at(r.lockedUntil), lastError, at(created), at(r.sent), at(r.failed))
		if err != nil {
			t.Fatalf("put %+v: %v", r, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// state returns a row's status, attempt and last_error ("" if NULL), or
// "gone" when the table does not hold it.
func (b *bundle) state(t *testing.T, id string) (status string, attempt int, lastError string) {
	t.Helper()
	var le *string
	err := b.pool.QueryRow(b.ctx, "SELECT status, attempt, last_error FROM "+b.table.Ident()+" WHERE id = $1", id).Scan(&status, &attempt, &le)
	if err != nil {
		return "gone", 0, ""
	}
	if le != nil {
		lastError = *le
	}
	return status, attempt, lastError
}

type auditEntry struct {
	Actor, Action string
	Filter        map[string]any
	Rows          int64
	At            time.Time
}

func (b *bundle) audit(t *testing.T) []auditEntry {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, "SELECT actor, action, filter, row_count, at FROM "+b.table.Related("audit")+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditEntry
	for rows.Next() {
		var e auditEntry
		if err := rows.Scan(&e.Actor, &e.Action, &e.Filter, &e.Rows, &e.At); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func TestStatusCountsStatesTopicsAndHolders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.put(t,
		row{topic: "orders", due: ago(90 * time.Second)},
		row{topic: "orders"},
		row{topic: "orders", due: in(time.Hour)},
		row{topic: "payments", due: ago(10 * time.Second)},
		row{topic: "orders", status: "processing", lockedBy: "relay-a#7", lockedUntil: in(30 * time.Second)},
		row{topic: "orders", status: "processing", lockedBy: "relay-a#8", lockedUntil: in(20 * time.Second)},
		row{topic: "payments", status: "processing", lockedBy: "relay-b#1", lockedUntil: ago(5 * time.Second)},
		row{topic: "orders", status: "failed", lastError: "too large", failed: ago(time.Minute)},
		row{topic: "payments", status: "failed", lastError: "parked: broker said no", failed: ago(time.Minute)},
		row{topic: "orders", status: "sent", lockedBy: "relay-a#5", sent: ago(3 * time.Second)},
		row{topic: "orders", status: "sent", lockedBy: "relay-b#2", sent: ago(time.Hour)},
		row{topic: "orders", status: "sent", lockedBy: "relay-b#2", sent: ago(2 * time.Hour)},
	)
	s, err := b.adm.Status(b.ctx, admin.StatusOptions{ExactSent: true})
	if err != nil {
		t.Fatal(err)
	}
	sent := int64(3)
	want := admin.Totals{PendingDue: 3, PendingDelayed: 1, Processing: 3, Lapsed: 1, Failed: 2, Parked: 1, Sent: &sent, SentExact: true}
	if got := s.Totals; got.PendingDue != want.PendingDue || got.PendingDelayed != want.PendingDelayed || got.Processing != want.Processing ||
		got.Lapsed != want.Lapsed || got.Failed != want.Failed || got.Parked != want.Parked || got.Sent == nil || *got.Sent != 3 || !got.SentExact {
		t.Errorf("totals = %+v (sent %v), want %+v", got, deref(got.Sent), want)
	}
	if s.OldestDueSeconds == nil || *s.OldestDueSeconds < 89 || *s.OldestDueSeconds > 120 {
		t.Errorf("oldest due = %v s, want about 90", deref(s.OldestDueSeconds))
	}
	if s.OldestLapsedSeconds == nil || *s.OldestLapsedSeconds < 4 {
		t.Errorf("oldest lapsed = %v s, want about 5", deref(s.OldestLapsedSeconds))
	}
	if s.OldestSentAt == nil || s.At.Sub(*s.OldestSentAt) < 2*time.Hour-time.Second {
		t.Errorf("oldest sent at %v, now %v: want 2h ago", s.OldestSentAt, s.At)
	}
	if len(s.Topics) != 2 || s.Topics[0].Topic != "orders" || s.Topics[1].Topic != "payments" {
		t.Fatalf("topics = %+v", s.Topics)
	}
	if o := s.Topics[0]; o.PendingDue != 2 || o.PendingDelayed != 1 || o.Processing != 2 || o.Failed != 1 || o.OldestDueSeconds == nil || *o.OldestDueSeconds < 89 {
		t.Errorf("orders = %+v", o)
	}
	if p := s.Topics[1]; p.PendingDue != 1 || p.Processing != 1 || p.Failed != 1 || p.OldestDueSeconds == nil || *p.OldestDueSeconds > 60 {
		t.Errorf("payments = %+v", p)
	}
	if len(s.Holders) != 2 || s.Holders[0].Relay != "relay-a" || s.Holders[0].Rows != 2 || s.Holders[0].Claims != 2 ||
		s.Holders[0].FirstLeaseEnd < 15 || s.Holders[0].LastLeaseEnd < 25 || s.Holders[1].Relay != "relay-b" || s.Holders[1].LastLeaseEnd > 0 {
		t.Errorf("holders = %+v", s.Holders)
	}
	if len(s.RecentSenders) != 2 || s.RecentSenders[0].Relay != "relay-a" || s.RecentSenders[0].Rows != 1 || s.RecentSenders[1].Rows != 2 {
		t.Errorf("recent senders = %+v", s.RecentSenders)
	}
	if s.Ordered != nil {
		t.Errorf("ordered = %+v without shard rows, want nil", s.Ordered)
	}
	jobs := s.Jobs
	if testdb.Partitioned() {
		if len(jobs) == 0 || jobs[0].Job != "partitions" {
			t.Errorf("jobs = %+v, want the partitions job first", jobs)
		} else {
			jobs = jobs[1:]
		}
		if n := len(s.Partitions); n < 2 || s.Partitions[n-1].From != nil || s.Partitions[0].From == nil || s.Partitions[0].Bytes <= 0 {
			t.Errorf("partitions = %+v, want range partitions and the DEFAULT one last", s.Partitions)
		}
	} else if s.Partitions != nil {
		t.Errorf("partitions = %+v on an unpartitioned table, want nil", s.Partitions)
	}
	if len(jobs) != 1 || jobs[0].Job != "retention" || jobs[0].Running || jobs[0].LastStartedSeconds != nil {
		t.Errorf("jobs = %+v, want the retention job, never run", jobs)
	}
	if !strings.Contains(s.SinkOutage, "outbox_sink_outage") {
		t.Errorf("sink outage = %q, want a pointer to the metric", s.SinkOutage)
	}

	// Shards, one leased, and a janitor run under way; sent rows counted
	// without ExactSent.
	if _, err := b.pool.Exec(b.ctx, "INSERT INTO "+b.table.Related("shard_ranges")+" (shard, locked_by, locked_until) VALUES (0, 'relay-a#9', now() + interval '20 s'), (1, NULL, now()), (2, NULL, '-infinity')"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, "UPDATE "+b.table.Related("shard_ranges")+" SET claimed = ARRAY[gen_random_uuid(), gen_random_uuid()] WHERE shard = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(b.ctx, "UPDATE "+b.table.Related("jobs")+" SET locked_by = 'relay-b#4', locked_until = now() + interval '30 s', last_started_at = now(), last_deleted = 7"); err != nil {
		t.Fatal(err)
	}
	s, err = b.adm.Status(b.ctx, admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Ordered == nil || s.Ordered.Shards != 3 || len(s.Ordered.Leased) != 1 || s.Ordered.Leased[0].HeldBy != "relay-a#9" || s.Ordered.Leased[0].InFlight != 2 {
		t.Errorf("ordered = %+v", s.Ordered)
	}
	if j := s.Jobs[0]; !j.Running || j.LastRunBy != "relay-b#4" || j.LastDeleted == nil || *j.LastDeleted != 7 {
		t.Errorf("retention job = %+v", j)
	}
	if !s.Totals.SentExact || s.Totals.Sent == nil || *s.Totals.Sent != 3 {
		t.Errorf("sent = %v (exact %v), want 3 counted on a table never analyzed", deref(s.Totals.Sent), s.Totals.SentExact)
	}
}

// Beyond SentCountLimit sent rows, Status estimates them: the limit before
// the table is analyzed, the planner's estimate after; ExactSent counts.
func TestStatusEstimatesSentBeyondTheCountLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = admin.SentCountLimit + 500
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table.Ident()+` (topic, payload, status, sent_at)
SELECT 'orders', '\x', 'sent', now() FROM generate_series(1, $1)`, n); err != nil {
		t.Fatal(err)
	}
	sent := func(o admin.StatusOptions) (int64, bool) {
		t.Helper()
		s, err := b.adm.Status(b.ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return *s.Totals.Sent, s.Totals.SentExact
	}
	if got, exact := sent(admin.StatusOptions{}); exact || got < admin.SentCountLimit || got > n+n/10 {
		t.Errorf("sent = %d (exact %v), want an estimate of at least %d", got, exact, admin.SentCountLimit)
	}
	if _, err := b.pool.Exec(b.ctx, "ANALYZE "+b.table.Ident()); err != nil {
		t.Fatal(err)
	}
	if got, exact := sent(admin.StatusOptions{}); exact || got <= admin.SentCountLimit || got > n+n/10 {
		t.Errorf("sent after ANALYZE = %d (exact %v), want the planner's estimate, about %d", got, exact, n)
	}
	if got, exact := sent(admin.StatusOptions{ExactSent: true}); !exact || got != n {
		t.Errorf("sent, counted = %d (exact %v), want %d", got, exact, n)
	}
}

// Status lists the sessions whose application_name starts with the
// prefix relay run uses.
func TestStatusListsConnectedRelays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	id := "host-1-" + uuid.NewString()[:8]
	cfg.ConnConfig.RuntimeParams["application_name"] = admin.DefaultSessionPrefix + id
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c1, _ := pool.Acquire(b.ctx)
	c2, err := pool.Acquire(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Release()
	defer c2.Release()
	s, err := b.adm.Status(b.ctx, admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(s.Sessions, func(c admin.Session) bool { return c.Relay == id })
	if i < 0 || s.Sessions[i].Connections != 2 || s.Sessions[i].ServesTable {
		t.Fatalf("sessions = %+v, want %s with 2 connections, not seen on the table", s.Sessions, id)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func TestListFailedFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.put(t,
		row{topic: "orders", status: "failed", lastError: "Message Too Large", created: ago(3 * time.Hour), failed: ago(2 * time.Hour), key: []byte("k1")},
		row{topic: "orders", status: "failed", lastError: "unknown topic", created: ago(2 * time.Hour), failed: ago(90 * time.Minute)},
		row{topic: "payments", status: "failed", lastError: "parked: message too large", created: ago(time.Hour), failed: ago(30 * time.Minute)},
		row{topic: "payments", status: "failed", lastError: "rejected", created: ago(10 * time.Minute), failed: ago(5 * time.Minute)},
		row{topic: "orders", status: "failed", lastError: "rejected 100%_"}, // failed before 007: no failed_at
		row{topic: "orders", status: "pending", lastError: "message too large"},
		row{topic: "orders", status: "sent"},
	)
	now, err := b.adm.Now(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		f    admin.Filter
		want []int
	}{
		{"all failed", admin.Filter{}, []int{0, 1, 2, 3, 4}},
		{"topic", admin.Filter{Topics: []string{"payments"}}, []int{2, 3}},
		{"topics", admin.Filter{Topics: []string{"payments", "orders"}}, []int{0, 1, 2, 3, 4}},
		{"error text in any case", admin.Filter{ErrorContains: "too LARGE"}, []int{0, 2}},
		{"no wildcards in error text", admin.Filter{ErrorContains: "100%_"}, []int{4}},
		{"percent is not a wildcard", admin.Filter{ErrorContains: "re%ed"}, nil},
		{"created from", admin.Filter{Created: admin.TimeRange{From: now.Add(-90 * time.Minute)}}, []int{2, 3, 4}},
		{"created to", admin.Filter{Created: admin.TimeRange{To: now.Add(-90 * time.Minute)}}, []int{0, 1}},
		{"failed range", admin.Filter{Failed: admin.TimeRange{From: now.Add(-100 * time.Minute), To: now.Add(-10 * time.Minute)}}, []int{1, 2}},
		{"ids, one not failed", admin.Filter{IDs: []string{ids[3], ids[5], strings.ToUpper(ids[0])}}, []int{0, 3}},
		{"topic and error", admin.Filter{Topics: []string{"orders"}, ErrorContains: "unknown"}, []int{1}},
	}
	for _, c := range cases {
		rows, next, err := b.adm.ListFailed(b.ctx, c.f, admin.Page{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.ID)
		}
		var want []string
		for _, i := range c.want {
			want = append(want, ids[i])
		}
		if !slices.Equal(got, want) || next != "" {
			t.Errorf("%s: got %v (next %q), want %v", c.name, got, next, want)
		}
		if n, err := b.adm.CountFailed(b.ctx, c.f); err != nil || n != int64(len(want)) {
			t.Errorf("%s: CountFailed = %d, %v; want %d", c.name, n, err, len(want))
		}
	}

	// Pages of 2 walk every failed row once, in id order.
	var walked []string
	pages := 0
	for after := ""; ; pages++ {
		rows, next, err := b.adm.ListFailed(b.ctx, admin.Filter{}, admin.Page{Limit: 2, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			walked = append(walked, r.ID)
		}
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(walked, ids[:5]) || pages != 2 {
		t.Errorf("paged walk = %v in %d pages after the first, want %v", walked, pages, ids[:5])
	}

	// Payloads only when asked; the rest of the row always.
	rows, _, err := b.adm.ListFailed(b.ctx, admin.Filter{IDs: ids[:1]}, admin.Page{})
	if err != nil || len(rows) != 1 {
		t.Fatal(rows, err)
	}
	r := rows[0]
	if r.Payload != nil || r.PayloadSize != len("payload 0") || string(r.Key) != "k1" || r.Topic != "orders" ||
		r.LastError != "Message Too Large" || r.FailedAt == nil || string(r.Headers) != `{"h": "v"}` {
		t.Errorf("row = %+v (headers %s), want no payload, its size, key, error, failed_at", r, r.Headers)
	}
	rows, _, err = b.adm.ListFailed(b.ctx, admin.Filter{IDs: ids[:1]}, admin.Page{WithPayload: true})
	if err != nil || len(rows) != 1 || string(rows[0].Payload) != "payload 0" {
		t.Errorf("with payload: %+v, %v", rows, err)
	}
	if _, _, err := b.adm.ListFailed(b.ctx, admin.Filter{IDs: []string{"not-a-uuid"}}, admin.Page{}); err == nil || !strings.Contains(err.Error(), `"not-a-uuid" is not an event id`) {
		t.Errorf("bad id: %v", err)
	}
}

// A row that left the failed state between a list and a retry (another
// operator retried it, a relay claimed it) is not touched; the others
// are, and the audit trail records the one change.
func TestRetryFailedIsFencedByState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.put(t,
		row{topic: "orders", status: "failed", attempt: 10, lastError: "attempt 10 of 10: broker said no", failed: ago(time.Minute)},
		row{topic: "orders", status: "failed", attempt: 10, lastError: "attempt 10 of 10: broker said no", failed: ago(time.Minute)},
		row{topic: "orders", status: "failed", attempt: 3, lastError: "too large", failed: ago(time.Minute)},
	)
	listed, _, err := b.adm.ListFailed(b.ctx, admin.Filter{}, admin.Page{})
	if err != nil || len(listed) != 3 {
		t.Fatal(listed, err)
	}
	// Meanwhile row 0 was retried by someone else and claimed by a relay.
	if _, err := b.pool.Exec(b.ctx, "UPDATE "+b.table.Ident()+" SET status = 'processing', locked_by = 'relay-x#1', locked_until = now() + interval '30 s' WHERE id = $1", ids[0]); err != nil {
		t.Fatal(err)
	}
	res, err := b.adm.RetryFailed(b.ctx, admin.Filter{IDs: ids[:2]}, admin.ActionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 || !slices.Equal(res.IDs, ids[1:2]) || len(res.Skipped) != 1 || res.Skipped[0] != (admin.Skipped{ID: ids[0], State: "processing"}) || res.AuditID == 0 {
		t.Errorf("result = %+v", res)
	}
	var lockedBy string
	var attempt int
	if err := b.pool.QueryRow(b.ctx, "SELECT locked_by, attempt FROM "+b.table.Ident()+" WHERE id = $1 AND status = 'processing'", ids[0]).Scan(&lockedBy, &attempt); err != nil || lockedBy != "relay-x#1" || attempt != 10 {
		t.Errorf("the claimed row was touched: locked_by %q, attempt %d, %v", lockedBy, attempt, err)
	}
	var due bool
	var failedAt *time.Time
	if err := b.pool.QueryRow(b.ctx, "SELECT next_retry_at <= now(), failed_at FROM "+b.table.Ident()+" WHERE id = $1", ids[1]).Scan(&due, &failedAt); err != nil || !due || failedAt != nil {
		t.Errorf("retried row: due %v, failed_at %v, %v", due, failedAt, err)
	}
	if st, att, le := b.state(t, ids[1]); st != "pending" || att != 0 || le != "attempt 10 of 10: broker said no" {
		t.Errorf("retried row = %s, attempt %d, last_error %q; want pending, 0, the error kept", st, att, le)
	}
	if st, _, _ := b.state(t, ids[2]); st != "failed" {
		t.Errorf("row not named was retried: %s", st)
	}
	audit := b.audit(t)
	if len(audit) != 1 || audit[0].Actor != "ops@test" || audit[0].Action != "failed.retry" || audit[0].Rows != 1 ||
		fmt.Sprint(audit[0].Filter["ids"]) != fmt.Sprint(ids[:2]) || audit[0].Filter["clear_error"] != false || time.Since(audit[0].At) > time.Minute {
		t.Errorf("audit = %+v", audit)
	}
	if !strings.Contains(b.log.String(), `"msg":"admin action","table":"`+b.table.String()+`","actor":"ops@test","action":"failed.retry","rows":1`) {
		t.Errorf("no log line for the change:\n%s", b.log.String())
	}

	// ClearError, by error text.
	res, err = b.adm.RetryFailed(b.ctx, admin.Filter{ErrorContains: "too large"}, admin.ActionOptions{ClearError: true})
	if err != nil || res.Rows != 1 {
		t.Fatal(res, err)
	}
	if st, att, le := b.state(t, ids[2]); st != "pending" || att != 0 || le != "" {
		t.Errorf("retried with ClearError = %s, %d, %q", st, att, le)
	}
}

func TestActionsRefuseWithoutActorOrFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.put(t, row{topic: "orders", status: "failed", lastError: "x"})
	if _, err := b.adm.RetryFailed(b.ctx, admin.Filter{}, admin.ActionOptions{}); !errors.Is(err, admin.ErrNoFilter) {
		t.Errorf("retry with no filter = %v, want ErrNoFilter", err)
	}
	if _, err := b.adm.PurgeFailed(b.ctx, admin.Filter{}, admin.ActionOptions{}); !errors.Is(err, admin.ErrNoFilter) {
		t.Errorf("purge with no filter = %v, want ErrNoFilter", err)
	}
	if _, err := b.adm.Replay(b.ctx, admin.ReplayFilter{Topics: []string{"orders"}}, admin.ActionOptions{}); !errors.Is(err, admin.ErrNoFilter) {
		t.Errorf("replay of a topic without a time range = %v, want ErrNoFilter", err)
	}
	anon, err := admin.New(b.pool, admin.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.RetryFailed(b.ctx, admin.Filter{IDs: ids}, admin.ActionOptions{}); !errors.Is(err, admin.ErrNoActor) {
		t.Errorf("retry without actor = %v, want ErrNoActor", err)
	}
	if st, _, _ := b.state(t, ids[0]); st != "failed" {
		t.Errorf("row changed: %s", st)
	}
	// All acts on every failed row.
	res, err := b.adm.RetryFailed(b.ctx, admin.Filter{All: true}, admin.ActionOptions{})
	if err != nil || res.Rows != 1 {
		t.Errorf("retry All = %+v, %v", res, err)
	}
}

// A dry run counts and changes nothing, and writes no audit entry; purge
// deletes only failed rows the filter matches, at most Limit of them.
func TestPurgeFailedAndDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.put(t,
		row{topic: "orders", status: "failed", lastError: "a"},
		row{topic: "orders", status: "failed", lastError: "b"},
		row{topic: "orders", status: "failed", lastError: "c"},
		row{topic: "orders", status: "pending"},
		row{topic: "payments", status: "failed", lastError: "d"},
	)
	res, err := b.adm.PurgeFailed(b.ctx, admin.Filter{Topics: []string{"orders"}}, admin.ActionOptions{DryRun: true})
	if err != nil || !res.DryRun || res.Rows != 3 || res.AuditID != 0 {
		t.Errorf("dry run = %+v, %v; want 3 rows", res, err)
	}
	res, err = b.adm.PurgeFailed(b.ctx, admin.Filter{Topics: []string{"orders"}}, admin.ActionOptions{DryRun: true, Limit: 2})
	if err != nil || res.Rows != 2 {
		t.Errorf("dry run with limit 2 = %+v, %v", res, err)
	}
	for _, id := range ids {
		if st, _, _ := b.state(t, id); st == "gone" {
			t.Fatalf("a dry run deleted %s", id)
		}
	}
	if a := b.audit(t); len(a) != 0 {
		t.Fatalf("a dry run wrote audit entries: %+v", a)
	}
	// The limit leaves one row, which the result counts.
	res, err = b.adm.PurgeFailed(b.ctx, admin.Filter{Topics: []string{"orders"}}, admin.ActionOptions{Limit: 2})
	if err != nil || res.Rows != 2 || !slices.Equal(res.IDs, ids[:2]) || res.Left != 1 {
		t.Fatalf("purge limit 2 = %+v, %v", res, err)
	}
	res, err = b.adm.PurgeFailed(b.ctx, admin.Filter{Topics: []string{"orders"}}, admin.ActionOptions{})
	if err != nil || res.Rows != 1 || !slices.Equal(res.IDs, ids[2:3]) || res.Left != 0 {
		t.Fatalf("purge the rest = %+v, %v", res, err)
	}
	want := []string{"gone", "gone", "gone", "pending", "failed"}
	for i, id := range ids {
		if st, _, _ := b.state(t, id); st != want[i] {
			t.Errorf("row %d = %s, want %s", i, st, want[i])
		}
	}
	audit := b.audit(t)
	if len(audit) != 2 || audit[0].Action != "failed.purge" || audit[0].Rows != 2 || audit[0].Filter["limit"] != float64(2) || audit[1].Rows != 1 {
		t.Errorf("audit = %+v", audit)
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.put(t,
		row{topic: "orders", status: "sent", attempt: 1, lockedBy: "relay-a#1", sent: ago(3 * time.Hour)},
		row{topic: "orders", status: "sent", attempt: 2, lockedBy: "relay-a#1", sent: ago(2 * time.Hour)},
		row{topic: "orders", status: "sent", attempt: 1, lockedBy: "relay-a#2", sent: ago(time.Hour)},
		row{topic: "payments", status: "sent", attempt: 1, lockedBy: "relay-a#2", sent: ago(time.Hour)},
		row{topic: "orders", status: "failed", lastError: "x"},
	)
	gone := uuid.Must(uuid.NewV7()).String()
	gone2 := uuid.Must(uuid.NewV7()).String()

	// Ids retention deleted: the whole replay is refused, naming them.
	for _, dry := range []bool{true, false} {
		_, err := b.adm.Replay(b.ctx, admin.ReplayFilter{IDs: []string{ids[0], gone, gone2}}, admin.ActionOptions{DryRun: dry})
		var nf *admin.NotFoundError
		if !errors.As(err, &nf) || !errors.Is(err, admin.ErrNotFound) || !slices.Equal(nf.IDs, []string{gone, gone2}) ||
			!strings.Contains(err.Error(), "2 ids are not in the table (deleted by retention") || !strings.Contains(err.Error(), gone2) {
			t.Errorf("dry run %v: replay of deleted ids = %v", dry, err)
		}
	}
	if st, _, _ := b.state(t, ids[0]); st != "sent" {
		t.Errorf("a refused replay changed a row: %s", st)
	}
	if a := b.audit(t); len(a) != 0 {
		t.Errorf("a refused replay left an audit entry: %+v", a)
	}

	// By ids: sent rows go back to pending with their id; a failed one is
	// skipped with its state.
	res, err := b.adm.Replay(b.ctx, admin.ReplayFilter{IDs: []string{ids[1], ids[4]}}, admin.ActionOptions{})
	if err != nil || res.Rows != 1 || !slices.Equal(res.IDs, ids[1:2]) || len(res.Skipped) != 1 || res.Skipped[0].State != "failed" {
		t.Fatalf("replay by ids = %+v, %v", res, err)
	}
	var sentAt *time.Time
	var due bool
	if err := b.pool.QueryRow(b.ctx, "SELECT sent_at, next_retry_at <= now() FROM "+b.table.Ident()+" WHERE id = $1", ids[1]).Scan(&sentAt, &due); err != nil || sentAt != nil || !due {
		t.Errorf("replayed row: sent_at %v, due %v, %v", sentAt, due, err)
	}
	if st, att, _ := b.state(t, ids[1]); st != "pending" || att != 0 {
		t.Errorf("replayed row = %s, attempt %d", st, att)
	}

	// By topic and sent range.
	now, err := b.adm.Now(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := admin.ReplayFilter{Topics: []string{"orders"}, Sent: admin.TimeRange{From: now.Add(-4 * time.Hour), To: now.Add(-30 * time.Minute)}}
	if n, err := b.adm.CountReplay(b.ctx, f); err != nil || n != 2 {
		t.Errorf("CountReplay = %d, %v; want 2 (rows 0 and 2)", n, err)
	}
	res, err = b.adm.Replay(b.ctx, f, admin.ActionOptions{})
	if err != nil || !slices.Equal(res.IDs, []string{ids[0], ids[2]}) {
		t.Fatalf("replay by topic and range = %+v, %v", res, err)
	}
	if st, _, _ := b.state(t, ids[3]); st != "sent" {
		t.Errorf("the other topic was replayed: %s", st)
	}
	audit := b.audit(t)
	if len(audit) != 2 || audit[1].Action != "replay" || audit[1].Rows != 2 || audit[1].Filter["sent"] == nil {
		t.Errorf("audit = %+v", audit)
	}
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(audit[1].Filter)
	if !strings.Contains(buf.String(), `"topics":["orders"]`) {
		t.Errorf("audit filter %s does not name the topic", buf.String())
	}
}

func TestActionsOnUnmigratedTableNameMigrateUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, _, err := migrations.Down(b.ctx, b.pool, b.table); err != nil {
		t.Fatal(err)
	}
	if _, err := b.adm.Status(b.ctx, admin.StatusOptions{}); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Errorf("Status = %v, want ErrNotMigrated", err)
	}
	if _, _, err := b.adm.ListFailed(b.ctx, admin.Filter{}, admin.Page{}); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Errorf("ListFailed = %v, want ErrNotMigrated", err)
	}
}

func TestAuditLogPagesNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	testAuditLog(t, b.ctx, b.adm, b.put)
}

// testAuditLog checks AuditLog on adm's empty table, into which put
// writes rows: entries of a retry, a purge and a replay come newest
// first, page by page.
func testAuditLog(t *testing.T, ctx context.Context, adm *admin.Admin, put func(*testing.T, ...row) []string) {
	entries, next, err := adm.AuditLog(ctx, admin.AuditPage{})
	if err != nil || entries == nil || len(entries) != 0 || next != 0 {
		t.Fatalf("an empty trail = %v, %d, %v", entries, next, err)
	}
	ids := put(t,
		row{topic: "orders", status: "failed", lastError: "a"},
		row{topic: "orders", status: "failed", lastError: "b"},
		row{topic: "payments", status: "failed", lastError: "c"},
		row{topic: "orders", status: "sent", sent: ago(time.Hour)},
	)
	var results []admin.Result
	for _, act := range []func() (admin.Result, error){
		func() (admin.Result, error) {
			return adm.RetryFailed(ctx, admin.Filter{Topics: []string{"orders"}}, admin.ActionOptions{})
		},
		func() (admin.Result, error) {
			return adm.WithActor("carol").PurgeFailed(ctx, admin.Filter{IDs: ids[2:3]}, admin.ActionOptions{})
		},
		func() (admin.Result, error) {
			return adm.Replay(ctx, admin.ReplayFilter{IDs: ids[3:]}, admin.ActionOptions{})
		},
	} {
		res, err := act()
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	want := []string{"ops@test replay 1", "carol failed.purge 1", "ops@test failed.retry 2"}
	entries, next, err = adm.AuditLog(ctx, admin.AuditPage{Limit: 2})
	if err != nil || len(entries) != 2 || next != entries[1].ID {
		t.Fatalf("page 1 = %+v, %d, %v", entries, next, err)
	}
	page2, next2, err := adm.AuditLog(ctx, admin.AuditPage{Before: next, Limit: 2})
	if err != nil || len(page2) != 1 || next2 != 0 {
		t.Fatalf("page 2 = %+v, %d, %v", page2, next2, err)
	}
	entries = append(entries, page2...)
	for i, e := range entries {
		res := results[len(results)-1-i]
		if got := fmt.Sprintf("%s %s %d", e.Actor, e.Action, e.Rows); got != want[i] || e.ID != res.AuditID || !e.At.Equal(res.At) {
			t.Errorf("entry %d = %q id %d at %v; want %q id %d at %v", i, got, e.ID, e.At, want[i], res.AuditID, res.At)
		}
	}
	var filter map[string]any
	if err := json.Unmarshal(entries[0].Filter, &filter); err != nil || fmt.Sprint(filter["ids"]) != fmt.Sprint(ids[3:]) {
		t.Errorf("the replay's filter %s: %v", entries[0].Filter, err)
	}
	// A page exactly as long as the rest of the trail is the last.
	if all, next, err := adm.AuditLog(ctx, admin.AuditPage{Limit: 3}); err != nil || len(all) != 3 || next != 0 {
		t.Errorf("a page of 3 = %d entries, next %d, %v", len(all), next, err)
	}
}

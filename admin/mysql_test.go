package admin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/internal/syncbuf"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// myBundle is a migrated MySQL/MariaDB table in a fresh database, an
// Admin on it and its log.
type myBundle struct {
	ctx   context.Context
	db    *sql.DB
	table outbox.Table
	adm   *admin.Admin
	log   *syncbuf.Buffer
}

func setupMySQL(t *testing.T) *myBundle {
	t.Helper()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	table := outbox.Table{Name: "outbox"}
	if _, err := migrations.UpMySQL(ctx, db, table); err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	adm, err := admin.NewMySQL(db, admin.Config{Table: table, Actor: "ops@test",
		Logger: slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return &myBundle{ctx: ctx, db: db, table: table, adm: adm, log: &log}
}

// put inserts rows (times are offsets from the database clock) and
// returns their ids, growing with each row.
func (b *myBundle) put(t *testing.T, rows ...row) []string {
	t.Helper()
	var ids []string
	for i, r := range rows {
		id := uuid.Must(uuid.NewV7())
		at := func(d *time.Duration) any {
			if d == nil {
				return nil
			}
			return d.Microseconds()
		}
		created, due := r.created, r.due
		if created == nil {
			created = in(0)
		}
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
		const t0 = "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND"
		_, err := b.db.ExecContext(b.ctx, "INSERT INTO outbox "+
			"(id, topic, `key`, payload, headers, status, attempt, next_retry_at, locked_by, locked_until, last_error, created_at, sent_at, failed_at) "+
			`VALUES (?, ?, ?, ?, '{"h": "v"}', ?, ?, `+t0+`, ?, `+t0+`, ?, `+t0+`, `+t0+`, `+t0+`)`,
			id[:], r.topic, r.key, fmt.Appendf(nil, "payload %d", i), status, r.attempt,
			at(due), lockedBy, at(r.lockedUntil), lastError, at(created), at(r.sent), at(r.failed))
		if err != nil {
			t.Fatalf("put %+v: %v", r, err)
		}
		ids = append(ids, id.String())
	}
	return ids
}

// state returns a row's status, attempt and last_error, or "gone".
func (b *myBundle) state(t *testing.T, id string) (status string, attempt int, lastError string) {
	t.Helper()
	var le sql.NullString
	u := uuid.MustParse(id)
	err := b.db.QueryRowContext(b.ctx, "SELECT status, attempt, last_error FROM outbox WHERE id = ?", u[:]).Scan(&status, &attempt, &le)
	if errors.Is(err, sql.ErrNoRows) {
		return "gone", 0, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return status, attempt, le.String
}

func (b *myBundle) audit(t *testing.T) []auditEntry {
	t.Helper()
	rows, err := b.db.QueryContext(b.ctx, "SELECT actor, action, `filter`, row_count, at FROM outbox_audit ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditEntry
	for rows.Next() {
		var e auditEntry
		var filter string
		if err := rows.Scan(&e.Actor, &e.Action, &filter, &e.Rows, &e.At); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(filter), &e.Filter); err != nil {
			t.Fatalf("audit filter %q: %v", filter, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMySQLStatus(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	b.put(t,
		row{topic: "orders", due: ago(90 * time.Second)},
		row{topic: "orders"},
		row{topic: "orders", due: in(time.Hour)},
		row{topic: "payments", due: ago(10 * time.Second)},
		row{topic: "orders", status: "processing", lockedBy: "relay-a#7", lockedUntil: in(30 * time.Second)},
		row{topic: "orders", status: "processing", lockedBy: "relay-a#8", lockedUntil: in(20 * time.Second)},
		row{topic: "payments", status: "processing", lockedBy: "relay-b#1", lockedUntil: ago(5 * time.Second)},
		row{topic: "orders", status: "failed", lastError: "too large", failed: ago(time.Minute)},
		row{topic: "payments", status: "failed", lastError: "broker said no", failed: ago(time.Minute)},
		row{topic: "orders", status: "sent", lockedBy: "relay-a#5", sent: ago(3 * time.Second)},
		row{topic: "orders", status: "sent", lockedBy: "relay-b#2", sent: ago(time.Hour)},
		row{topic: "orders", status: "sent", lockedBy: "relay-b#2", sent: ago(2 * time.Hour)},
	)
	s, err := b.adm.Status(b.ctx, admin.StatusOptions{ExactSent: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Totals; got.PendingDue != 3 || got.PendingDelayed != 1 || got.Processing != 3 || got.Lapsed != 1 ||
		got.Failed != 2 || got.Parked != 0 || got.Sent == nil || *got.Sent != 3 || !got.SentExact {
		t.Errorf("totals = %+v (sent %v)", got, deref(got.Sent))
	}
	if s.Table != "outbox" || s.Dialect != "mysql" || s.SessionsNote != admin.SessionsNoteMySQL || s.Ordered != nil || s.Partitions != nil {
		t.Errorf("table %q, dialect %q, sessions note %q, ordered %v, partitions %v", s.Table, s.Dialect, s.SessionsNote, s.Ordered, s.Partitions)
	}
	if time.Since(s.At).Abs() > time.Minute {
		t.Errorf("at = %v, want the database clock in UTC", s.At)
	}
	if s.OldestDueSeconds == nil || *s.OldestDueSeconds < 89 || *s.OldestDueSeconds > 120 {
		t.Errorf("oldest due = %v s, want about 90", deref(s.OldestDueSeconds))
	}
	if s.OldestLapsedSeconds == nil || *s.OldestLapsedSeconds < 4 || *s.OldestLapsedSeconds > 60 {
		t.Errorf("oldest lapsed = %v s, want about 5", deref(s.OldestLapsedSeconds))
	}
	if s.OldestSentAt == nil || s.At.Sub(*s.OldestSentAt) < 2*time.Hour-time.Second || s.At.Sub(*s.OldestSentAt) > 2*time.Hour+time.Minute {
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
	if len(s.RecentSenders) != 2 || s.RecentSenders[0].Relay != "relay-a" || s.RecentSenders[0].Rows != 1 || s.RecentSenders[1].Rows != 2 ||
		s.RecentSenders[1].LastSentSeconds < 3599 {
		t.Errorf("recent senders = %+v", s.RecentSenders)
	}
	if len(s.Jobs) != 1 || s.Jobs[0].Job != "retention" || s.Jobs[0].Running || s.Jobs[0].LastStartedSeconds != nil {
		t.Errorf("jobs = %+v, want the retention job, never run", s.Jobs)
	}

	// A janitor run under way; sent rows counted without ExactSent.
	if _, err := b.db.ExecContext(b.ctx, "UPDATE outbox_jobs SET locked_by = 'relay-b#4', locked_until = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, "+
		"last_started_at = UTC_TIMESTAMP(6) - INTERVAL 2 SECOND, last_deleted = 7, total_deleted = 9"); err != nil {
		t.Fatal(err)
	}
	s, err = b.adm.Status(b.ctx, admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j := s.Jobs[0]; !j.Running || j.LastRunBy != "relay-b#4" || j.LastDeleted == nil || *j.LastDeleted != 7 || j.TotalDeleted != 9 ||
		j.LastStartedSeconds == nil || *j.LastStartedSeconds < 1.5 || j.LastFinishedSeconds != nil {
		t.Errorf("retention job = %+v", j)
	}
	if !s.Totals.SentExact || s.Totals.Sent == nil || *s.Totals.Sent != 3 {
		t.Errorf("sent = %v (exact %v), want 3 counted", deref(s.Totals.Sent), s.Totals.SentExact)
	}
}

func TestMySQLListFailedFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	ids := b.put(t,
		row{topic: "orders", status: "failed", attempt: 10, key: []byte("k1"), lastError: "attempt 10: Broker Said No", created: ago(3 * time.Hour), failed: ago(2 * time.Hour)},
		row{topic: "orders", status: "failed", attempt: 3, lastError: "message too large", created: ago(time.Hour), failed: ago(30 * time.Minute)},
		row{topic: "payments", status: "failed", attempt: 10, lastError: "broker said no", failed: ago(time.Minute)},
		row{topic: "orders", status: "sent", sent: ago(time.Minute)},
		row{topic: "orders", status: "pending"},
	)
	// A row written by the writer through outbox.FromMySQL, then failed.
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := b.db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	written, err := w.Write(b.ctx, outbox.FromMySQL(tx), outbox.Message{Topic: "invoices", Payload: []byte(`{"n":1}`), Headers: map[string]string{"trace": "abc"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	wid := written.ID
	if _, err := b.db.ExecContext(b.ctx, "UPDATE outbox SET status = 'failed', failed_at = UTC_TIMESTAMP(6), last_error = 'rejected' WHERE id = ?", wid[:]); err != nil {
		t.Fatal(err)
	}

	all, next, err := b.adm.ListFailed(b.ctx, admin.Filter{}, admin.Page{})
	if err != nil || next != "" || len(all) != 4 {
		t.Fatalf("all = %d rows, next %q, %v", len(all), next, err)
	}
	if got := []string{all[0].ID, all[1].ID, all[2].ID, all[3].ID}; !slices.Equal(got, append(slices.Clone(ids[:3]), wid.String())) {
		t.Errorf("ids = %v, want %v and the written one, in id order", got, ids[:3])
	}
	r := all[0]
	if r.Topic != "orders" || string(r.Key) != "k1" || r.Attempt != 10 || r.LastError != "attempt 10: Broker Said No" || r.FailedAt == nil ||
		r.PayloadSize != len("payload 0") || r.Payload != nil || !strings.Contains(string(r.Headers), `"h"`) || time.Since(r.CreatedAt) < 3*time.Hour-time.Minute {
		t.Errorf("row 0 = %+v", r)
	}
	if w := all[3]; w.Topic != "invoices" || w.Key != nil || !strings.Contains(string(w.Headers), `"trace"`) || w.LastError != "rejected" || w.Payload != nil {
		t.Errorf("written row = %+v", w)
	}
	withPayload, _, err := b.adm.ListFailed(b.ctx, admin.Filter{IDs: []string{wid.String()}}, admin.Page{WithPayload: true})
	if err != nil || len(withPayload) != 1 || string(withPayload[0].Payload) != `{"n":1}` {
		t.Errorf("with payload = %+v, %v", withPayload, err)
	}

	// Pages of 2: the cursor is the last id.
	p1, next, err := b.adm.ListFailed(b.ctx, admin.Filter{}, admin.Page{Limit: 2})
	if err != nil || len(p1) != 2 || next != ids[1] {
		t.Fatalf("page 1 = %d rows, next %q, %v", len(p1), next, err)
	}
	p2, next, err := b.adm.ListFailed(b.ctx, admin.Filter{}, admin.Page{Limit: 2, After: next})
	if err != nil || len(p2) != 2 || p2[0].ID != ids[2] || next != wid.String() {
		t.Fatalf("page 2 = %+v, next %q, %v", p2, next, err)
	}
	p3, next, err := b.adm.ListFailed(b.ctx, admin.Filter{}, admin.Page{Limit: 2, After: next})
	if err != nil || len(p3) != 0 || next != "" {
		t.Fatalf("page 3 = %+v, next %q, %v", p3, next, err)
	}

	now, err := b.adm.Now(b.ctx)
	if err != nil || time.Since(now).Abs() > time.Minute {
		t.Fatalf("now = %v, %v", now, err)
	}
	for _, c := range []struct {
		name string
		f    admin.Filter
		want []string
	}{
		{"topic", admin.Filter{Topics: []string{"orders"}}, ids[:2]},
		{"topics", admin.Filter{Topics: []string{"payments", "invoices"}}, []string{ids[2], wid.String()}},
		{"error in any case", admin.Filter{ErrorContains: "BROKER said"}, []string{ids[0], ids[2]}},
		{"failed range", admin.Filter{Failed: admin.TimeRange{From: now.Add(-3 * time.Hour), To: now.Add(-10 * time.Minute)}}, ids[:2]},
		{"created before", admin.Filter{Created: admin.TimeRange{To: now.Add(-2 * time.Hour)}}, ids[:1]},
		{"ids, a sent one among them", admin.Filter{IDs: []string{ids[1], ids[3]}}, ids[1:2]},
		{"everything combined", admin.Filter{Topics: []string{"orders"}, ErrorContains: "large", Created: admin.TimeRange{From: now.Add(-2 * time.Hour)}}, ids[1:2]},
		{"% is no wildcard", admin.Filter{ErrorContains: "%"}, nil},
		{"_ is no wildcard (\"10:\" is in an error)", admin.Filter{ErrorContains: "10_"}, nil},
		{"text with a colon", admin.Filter{ErrorContains: "10:"}, ids[:1]},
	} {
		rows, _, err := b.adm.ListFailed(b.ctx, c.f, admin.Page{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if n, err := b.adm.CountFailed(b.ctx, c.f); err != nil || n != int64(len(c.want)) {
			t.Errorf("%s: CountFailed = %d, %v; want %d", c.name, n, err, len(c.want))
		}
	}
}

// lockWaitPoll serialises the polls of INNODB_TRX: InnoDB refreshes that
// table only when nobody read it for 100 ms, so tests polling it side by
// side would keep each other reading the same stale snapshot.
var lockWaitPoll sync.Mutex

// awaitLockWait waits until a transaction of db's database waits for a
// row lock.
func awaitLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	lockWaitPoll.Lock()
	defer lockWaitPoll.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		err := db.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_TRX AS x " +
			"JOIN information_schema.PROCESSLIST AS p ON p.ID = x.trx_mysql_thread_id " +
			"WHERE x.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no statement came to wait for the row lock")
		}
		// Polling a condition, no event to wait on, slower than the
		// 100 ms after which InnoDB refreshes INNODB_TRX.
		time.Sleep(150 * time.Millisecond)
	}
}

func TestMySQLRetryFailedIsFencedByState(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	ids := b.put(t,
		row{topic: "orders", status: "failed", attempt: 10, lastError: "attempt 10 of 10: broker said no", failed: ago(time.Minute)},
		row{topic: "orders", status: "failed", attempt: 10, lastError: "attempt 10 of 10: broker said no", failed: ago(time.Minute)},
		row{topic: "orders", status: "failed", attempt: 3, lastError: "too large", failed: ago(time.Minute)},
		row{topic: "orders", status: "processing", lockedBy: "relay-y#1", lockedUntil: in(time.Minute)},
	)
	// While the retry runs, another operator holds row 0 and puts it to
	// processing (claimed by a relay): the retry waits for the lock, then
	// finds it no longer failed and leaves it alone.
	other, err := b.db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback() //nolint:errcheck
	u0 := uuid.MustParse(ids[0])
	if _, err := other.ExecContext(b.ctx, "UPDATE outbox SET status = 'processing', locked_by = 'relay-x#1', locked_until = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND WHERE id = ?", u0[:]); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res admin.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := b.adm.RetryFailed(b.ctx, admin.Filter{IDs: []string{ids[0], ids[1], ids[3]}}, admin.ActionOptions{})
		done <- outcome{res, err}
	}()
	awaitLockWait(t, b.db)
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	res := o.res
	if res.Rows != 1 || !slices.Equal(res.IDs, ids[1:2]) || res.AuditID == 0 || res.Ordered ||
		!slices.Equal(res.Skipped, []admin.Skipped{{ID: ids[0], State: "processing"}, {ID: ids[3], State: "processing"}}) {
		t.Errorf("result = %+v", res)
	}
	var lockedBy string
	var attempt int
	if err := b.db.QueryRowContext(b.ctx, "SELECT locked_by, attempt FROM outbox WHERE id = ? AND status = 'processing'", u0[:]).Scan(&lockedBy, &attempt); err != nil || lockedBy != "relay-x#1" || attempt != 10 {
		t.Errorf("the claimed row was touched: locked_by %q, attempt %d, %v", lockedBy, attempt, err)
	}
	if st, _, _ := b.state(t, ids[3]); st != "processing" {
		t.Errorf("a processing row named by id was changed: %s", st)
	}
	u1 := uuid.MustParse(ids[1])
	var due bool
	var failedAt sql.NullTime
	if err := b.db.QueryRowContext(b.ctx, "SELECT next_retry_at <= UTC_TIMESTAMP(6), failed_at FROM outbox WHERE id = ?", u1[:]).Scan(&due, &failedAt); err != nil || !due || failedAt.Valid {
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
		fmt.Sprint(audit[0].Filter["ids"]) != fmt.Sprint([]string{ids[0], ids[1], ids[3]}) || audit[0].Filter["clear_error"] != false ||
		time.Since(audit[0].At).Abs() > time.Minute || !audit[0].At.Equal(res.At) {
		t.Errorf("audit = %+v (result at %v)", audit, res.At)
	}
	if !strings.Contains(b.log.String(), `"msg":"admin action","table":"outbox","actor":"ops@test","action":"failed.retry","rows":1`) {
		t.Errorf("no log line for the change:\n%s", b.log.String())
	}

	// ClearError, by error text; a limit.
	res, err = b.adm.RetryFailed(b.ctx, admin.Filter{ErrorContains: "TOO large"}, admin.ActionOptions{ClearError: true, Limit: 5})
	if err != nil || res.Rows != 1 || res.IDs[0] != ids[2] {
		t.Fatal(res, err)
	}
	if st, att, le := b.state(t, ids[2]); st != "pending" || att != 0 || le != "" {
		t.Errorf("retried with ClearError = %s, %d, %q", st, att, le)
	}
}

func TestMySQLPurgeFailedDryRunAndLimit(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	ids := b.put(t,
		row{topic: "orders", status: "failed", lastError: "x"},
		row{topic: "orders", status: "failed", lastError: "x"},
		row{topic: "orders", status: "failed", lastError: "x"},
		row{topic: "orders", status: "sent", sent: ago(time.Minute)},
	)
	res, err := b.adm.PurgeFailed(b.ctx, admin.Filter{Topics: []string{"orders"}}, admin.ActionOptions{DryRun: true})
	if err != nil || !res.DryRun || res.Rows != 3 || res.AuditID != 0 {
		t.Errorf("dry run = %+v, %v", res, err)
	}
	res, err = b.adm.PurgeFailed(b.ctx, admin.Filter{IDs: []string{ids[0], ids[3]}}, admin.ActionOptions{DryRun: true})
	if err != nil || res.Rows != 1 || len(res.Skipped) != 1 || res.Skipped[0] != (admin.Skipped{ID: ids[3], State: "sent"}) {
		t.Errorf("dry run by ids = %+v, %v", res, err)
	}
	if st, _, _ := b.state(t, ids[0]); st != "failed" || len(b.audit(t)) != 0 {
		t.Fatalf("a dry run changed something: %s, audit %+v", st, b.audit(t))
	}
	if _, err := b.adm.PurgeFailed(b.ctx, admin.Filter{}, admin.ActionOptions{}); !errors.Is(err, admin.ErrNoFilter) {
		t.Errorf("purge without a filter = %v, want ErrNoFilter", err)
	}
	res, err = b.adm.PurgeFailed(b.ctx, admin.Filter{All: true}, admin.ActionOptions{Limit: 2})
	if err != nil || res.Rows != 2 || !slices.Equal(res.IDs, ids[:2]) || res.Left != 1 {
		t.Fatalf("purge of 2 = %+v, %v", res, err)
	}
	if a, b2, c, d := b.stateOnly(t, ids[0]), b.stateOnly(t, ids[1]), b.stateOnly(t, ids[2]), b.stateOnly(t, ids[3]); a != "gone" || b2 != "gone" || c != "failed" || d != "sent" {
		t.Errorf("after purge: %s %s %s %s", a, b2, c, d)
	}
	audit := b.audit(t)
	if len(audit) != 1 || audit[0].Action != "failed.purge" || audit[0].Rows != 2 || audit[0].Filter["all"] != true || audit[0].Filter["limit"] != float64(2) {
		t.Errorf("audit = %+v", audit)
	}
	noActor, err := admin.NewMySQL(b.db, admin.Config{Table: b.table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noActor.PurgeFailed(b.ctx, admin.Filter{All: true}, admin.ActionOptions{}); !errors.Is(err, admin.ErrNoActor) {
		t.Errorf("purge without an actor = %v, want ErrNoActor", err)
	}
	if st := b.stateOnly(t, ids[2]); st != "failed" {
		t.Errorf("a refused purge deleted a row: %s", st)
	}
}

func (b *myBundle) stateOnly(t *testing.T, id string) string {
	t.Helper()
	st, _, _ := b.state(t, id)
	return st
}

func TestMySQLReplay(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	ids := b.put(t,
		row{topic: "orders", status: "sent", attempt: 1, lockedBy: "relay-a#1", sent: ago(3 * time.Hour)},
		row{topic: "orders", status: "sent", attempt: 2, lockedBy: "relay-a#1", sent: ago(2 * time.Hour)},
		row{topic: "orders", status: "sent", attempt: 1, lockedBy: "relay-a#2", sent: ago(time.Hour)},
		row{topic: "payments", status: "sent", attempt: 1, lockedBy: "relay-a#2", sent: ago(time.Hour)},
		row{topic: "orders", status: "failed", lastError: "x"},
	)
	gone := uuid.Must(uuid.NewV7()).String()
	gone2 := uuid.Must(uuid.NewV7()).String()
	for _, dry := range []bool{true, false} {
		_, err := b.adm.Replay(b.ctx, admin.ReplayFilter{IDs: []string{ids[0], gone, gone2}}, admin.ActionOptions{DryRun: dry})
		var nf *admin.NotFoundError
		if !errors.As(err, &nf) || !errors.Is(err, admin.ErrNotFound) || !slices.Equal(nf.IDs, []string{gone, gone2}) ||
			!strings.Contains(err.Error(), "2 ids are not in the table (deleted by retention") || !strings.Contains(err.Error(), gone2) {
			t.Errorf("dry run %v: replay of deleted ids = %v", dry, err)
		}
	}
	if st := b.stateOnly(t, ids[0]); st != "sent" {
		t.Errorf("a refused replay changed a row: %s", st)
	}
	if a := b.audit(t); len(a) != 0 {
		t.Errorf("a refused replay left an audit entry: %+v", a)
	}

	res, err := b.adm.Replay(b.ctx, admin.ReplayFilter{IDs: []string{ids[1], ids[4]}}, admin.ActionOptions{})
	if err != nil || res.Rows != 1 || !slices.Equal(res.IDs, ids[1:2]) || len(res.Skipped) != 1 || res.Skipped[0].State != "failed" || res.Ordered {
		t.Fatalf("replay by ids = %+v, %v", res, err)
	}
	u1 := uuid.MustParse(ids[1])
	var sentAt sql.NullTime
	var due bool
	if err := b.db.QueryRowContext(b.ctx, "SELECT sent_at, next_retry_at <= UTC_TIMESTAMP(6) FROM outbox WHERE id = ?", u1[:]).Scan(&sentAt, &due); err != nil || sentAt.Valid || !due {
		t.Errorf("replayed row: sent_at %v, due %v, %v", sentAt, due, err)
	}
	if st, att, _ := b.state(t, ids[1]); st != "pending" || att != 0 {
		t.Errorf("replayed row = %s, attempt %d", st, att)
	}
	if st := b.stateOnly(t, ids[4]); st != "failed" {
		t.Errorf("the failed row named was changed: %s", st)
	}

	now, err := b.adm.Now(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := admin.ReplayFilter{Topics: []string{"orders"}, Sent: admin.TimeRange{From: now.Add(-4 * time.Hour), To: now.Add(-30 * time.Minute)}}
	if n, err := b.adm.CountReplay(b.ctx, f); err != nil || n != 2 {
		t.Errorf("CountReplay = %d, %v; want 2 (rows 0 and 2)", n, err)
	}
	// A limit of 1 leaves one row, which the result counts.
	res, err = b.adm.Replay(b.ctx, f, admin.ActionOptions{Limit: 1})
	if err != nil || !slices.Equal(res.IDs, []string{ids[0]}) || res.Left != 1 {
		t.Fatalf("replay by topic and range, limit 1 = %+v, %v", res, err)
	}
	res, err = b.adm.Replay(b.ctx, f, admin.ActionOptions{})
	if err != nil || !slices.Equal(res.IDs, []string{ids[2]}) || res.Left != 0 {
		t.Fatalf("replay by topic and range = %+v, %v", res, err)
	}
	if st := b.stateOnly(t, ids[3]); st != "sent" {
		t.Errorf("the other topic was replayed: %s", st)
	}
	audit := b.audit(t)
	if len(audit) != 3 || audit[2].Action != "replay" || audit[1].Rows != 1 || audit[2].Rows != 1 || audit[2].Filter["sent"] == nil ||
		fmt.Sprint(audit[2].Filter["topics"]) != "[orders]" {
		t.Errorf("audit = %+v", audit)
	}

	// Deleted while the replay waits for its lock: the janitor (or
	// anyone) holds the row and deletes it; the replay then fails whole.
	other, err := b.db.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback() //nolint:errcheck
	u3 := uuid.MustParse(ids[3])
	if _, err := other.ExecContext(b.ctx, "DELETE FROM outbox WHERE id = ?", u3[:]); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.adm.Replay(b.ctx, admin.ReplayFilter{IDs: []string{ids[3], ids[2]}}, admin.ActionOptions{})
		done <- err
	}()
	awaitLockWait(t, b.db)
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	var nf *admin.NotFoundError
	if err := <-done; !errors.As(err, &nf) || !slices.Equal(nf.IDs, ids[3:4]) {
		t.Errorf("replay of a row deleted meanwhile = %v, want NotFoundError naming it", err)
	}
	if len(b.audit(t)) != 3 {
		t.Errorf("a refused replay left an audit entry")
	}
}

func TestMySQLUnmigratedTableNamesMigrateUp(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	adm, err := admin.NewMySQL(db, admin.Config{Table: outbox.Table{Name: "outbox"}, Actor: "ops@test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := adm.Status(ctx, admin.StatusOptions{}); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Errorf("Status = %v, want ErrNotMigrated", err)
	}
	if _, err := adm.RetryFailed(ctx, admin.Filter{All: true}, admin.ActionOptions{}); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Errorf("RetryFailed = %v, want ErrNotMigrated", err)
	}
}

// On a server with the performance schema on, Status lists the relays
// connected by their program_name connection attribute, as relay run
// sets it, in this database only.
func TestMySQLStatusListsConnectedRelays(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Private(t, "--performance-schema=ON")
	db, dsn := srv.DB(t)
	ctx := context.Background()
	if _, err := migrations.UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	connect := func(program, database string) *sql.DB {
		t.Helper()
		cfg, err := mariadbtest.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnectionAttributes = "program_name:" + program
		if database != "" {
			cfg.DBName = database
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := sql.OpenDB(conn)
		t.Cleanup(func() { _ = c.Close() })
		c.SetMaxIdleConns(4)
		// Two sessions held open at once.
		var held []*sql.Conn
		for range 2 {
			sc, err := c.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, sc)
		}
		for _, sc := range held {
			_ = sc.Close() // back to the pool, still connected
		}
		return c
	}
	connect(admin.DefaultSessionPrefix+"relay-q", "")
	connect(admin.DefaultSessionPrefix+"relay-idle", "")
	connect("outboxrelay-admin someone", "")
	connect(admin.DefaultSessionPrefix+"relay-elsewhere", "mysql")
	id := uuid.Must(uuid.NewV7())
	if _, err := db.ExecContext(ctx, "INSERT INTO outbox (id, topic, payload, status, locked_by, locked_until) "+
		"VALUES (?, 'orders', 'x', 'processing', 'relay-q#1', UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE)", id[:]); err != nil {
		t.Fatal(err)
	}
	adm, err := admin.NewMySQL(db, admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := adm.Status(ctx, admin.StatusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.SessionsNote != "" {
		t.Errorf("sessions note = %q with the performance schema on", s.SessionsNote)
	}
	want := []admin.Session{
		{Relay: "relay-idle", Connections: 2, Clients: "127.0.0.1"},
		{Relay: "relay-q", Connections: 2, Clients: "127.0.0.1", ServesTable: true},
	}
	if !slices.Equal(s.Sessions, want) {
		t.Errorf("sessions = %+v, want %+v", s.Sessions, want)
	}
}

func TestMySQLAuditLogPagesNewestFirst(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t)
	testAuditLog(t, b.ctx, b.adm, b.put)
}

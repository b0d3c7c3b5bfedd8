package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/relay"
)

// The retention janitor (migration 004, docs/architecture.md#retention).
// Rows are aged by SQL: sent_at is set into the past on the database
// clock, which is the only clock the janitor reads.

// age turns rows into status with sent_at that long ago (a PostgreSQL
// interval). Pending rows are made due in an hour and processing rows are
// leased for an hour, so that a running relay leaves them alone.
func (b *bundle) age(ids []uuid.UUID, status, ago string) {
	b.t.Helper()
	n := b.exec(`UPDATE {{table}}
SET status = $1,
    sent_at = now() - $2::interval,
    created_at = now() - $2::interval - interval '1 minute',
    next_retry_at = CASE WHEN $1 = 'pending' THEN now() + interval '1 hour' ELSE next_retry_at END,
    locked_by = CASE WHEN $1 = 'processing' THEN 'elsewhere#1' ELSE locked_by END,
    locked_until = CASE WHEN $1 = 'processing' THEN now() + interval '1 hour' END
WHERE id = ANY($3)`, status, ago, ids)
	if n != int64(len(ids)) {
		b.t.Fatalf("aged %d rows, want %d", n, len(ids))
	}
}

// aged inserts n rows as age leaves them, in one statement, so that a
// running relay never sees them pending.
func (b *bundle) aged(n int, status, ago string) []uuid.UUID {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, b.sql(`INSERT INTO {{table}} (id, topic, payload, status, sent_at, created_at, next_retry_at, locked_by, locked_until)
SELECT gen_random_uuid(), 'orders', convert_to($1 || '-' || i, 'UTF8'), $1,
       now() - $2::interval,
       now() - $2::interval - interval '1 minute',
       CASE WHEN $1 = 'pending' THEN now() + interval '1 hour' ELSE now() END,
       CASE WHEN $1 = 'processing' THEN 'elsewhere#1' END,
       CASE WHEN $1 = 'processing' THEN now() + interval '1 hour' END
FROM generate_series(1, $3) AS i
RETURNING id`), status, ago, n)
	if err != nil {
		b.t.Fatalf("insert %d %s rows: %v", n, status, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil || len(ids) != n {
		b.t.Fatalf("insert %d %s rows: %d, %v", n, status, len(ids), err)
	}
	return ids
}

// present counts which of ids are still in the table.
func (b *bundle) present(ids []uuid.UUID) int {
	b.t.Helper()
	return b.count("id = ANY($1)", ids)
}

// jobState is the retention job's row of <table>_jobs.
type jobState struct {
	LockedBy       *string
	LockedUntil    *time.Time
	NextRunAt      time.Time
	LastStartedAt  *time.Time
	LastFinishedAt *time.Time
	LastDeleted    *int64
	TotalDeleted   int64
}

// job reads the retention job's row, as an operator would.
func (b *bundle) job() jobState {
	b.t.Helper()
	var j jobState
	err := b.pool.QueryRow(b.ctx, `SELECT locked_by, locked_until, next_run_at, last_started_at, last_finished_at, last_deleted, total_deleted
FROM `+b.table.Related("jobs")+`
WHERE job = 'retention'`).Scan(&j.LockedBy, &j.LockedUntil, &j.NextRunAt, &j.LastStartedAt, &j.LastFinishedAt, &j.LastDeleted, &j.TotalDeleted)
	if err != nil {
		b.t.Fatalf("read the retention job: %v", err)
	}
	return j
}

// heldBy reports whether a run of relay r holds or held the job last.
func (j jobState) heldBy(r *relay.Relay) bool {
	return j.LockedBy != nil && strings.HasPrefix(*j.LockedBy, r.ID()+"#")
}

// runRetention calls RunRetention and fails the test on an error.
func runRetention(t *testing.T, ctx context.Context, r *relay.Relay) relay.RetentionResult {
	t.Helper()
	res, err := r.RunRetention(ctx)
	if err != nil {
		t.Fatalf("RunRetention: %v", err)
	}
	return res
}

// Sent rows older than the retention are deleted; younger sent rows, and
// failed, pending and processing rows of any age, are kept. The job row
// says who ran, when, and what the run deleted, and schedules the next run
// one JanitorInterval after this one finished.
func TestRetentionDeletesOnlyExpiredSentRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired := b.aged(12, "sent", "2 hours")
	young := b.aged(5, "sent", "30 minutes")
	var others []uuid.UUID
	for _, status := range []string{"failed", "pending", "processing"} {
		others = append(others, b.aged(3, status, "30 days")...) // sent_at too, to prove that status decides
	}
	othersBefore := b.rows("id = ANY($1)", others)

	r := b.newRelay(&sink{}, relay.Config{Retention: time.Hour})
	before := b.dbNow()
	res := runRetention(t, b.ctx, r)
	after := b.dbNow()
	if want := (relay.RetentionResult{Ran: true, Deleted: 12, Batches: 1, Complete: true, Vacuumed: true}); res != want {
		t.Fatalf("RunRetention = %+v, want %+v", res, want)
	}
	if n := b.present(expired); n != 0 {
		t.Errorf("%d expired sent rows are still there", n)
	}
	if n := b.present(young); n != len(young) {
		t.Errorf("%d of %d young sent rows were deleted", len(young)-n, len(young))
	}
	if othersAfter := b.rows("id = ANY($1)", others); !reflect.DeepEqual(othersAfter, othersBefore) {
		t.Errorf("failed, pending or processing rows changed:\nbefore %+v\nafter  %+v", othersBefore, othersAfter)
	}

	j := b.job()
	between := func(p *time.Time) bool { return p != nil && !p.Before(before) && !p.After(after) }
	switch {
	case !j.heldBy(r):
		t.Errorf("locked_by = %v, want a token of %s", deref(j.LockedBy), r.ID())
	case !between(j.LockedUntil) || !between(j.LastStartedAt) || !between(j.LastFinishedAt):
		t.Errorf("locked_until %v, last_started_at %v, last_finished_at %v: want each within the run [%v, %v]",
			deref(j.LockedUntil), deref(j.LastStartedAt), deref(j.LastFinishedAt), before, after)
	case !j.NextRunAt.Equal(j.LastFinishedAt.Add(time.Minute)):
		t.Errorf("next_run_at = %v, want last_finished_at + 1m (JanitorInterval) = %v", j.NextRunAt, j.LastFinishedAt.Add(time.Minute))
	case j.LastDeleted == nil || *j.LastDeleted != 12 || j.TotalDeleted != 12:
		t.Errorf("last_deleted %v, total_deleted %d; want 12, 12", deref(j.LastDeleted), j.TotalDeleted)
	}

	// Not due again until next_run_at, on any replica.
	other := b.newRelay(&sink{}, relay.Config{Retention: time.Hour})
	if res := runRetention(t, b.ctx, other); res != (relay.RetentionResult{}) {
		t.Errorf("RunRetention before next_run_at = %+v, want nothing done", res)
	}
	// Once due, the next run takes what expired since.
	b.age(young, "sent", "90 minutes")
	b.exec("UPDATE " + b.table.Related("jobs") + " SET next_run_at = now()")
	if res := runRetention(t, b.ctx, other); res.Deleted != 5 || !res.Complete {
		t.Errorf("second run = %+v, want 5 deleted, complete", res)
	}
	if j := b.job(); !j.heldBy(other) || *j.LastDeleted != 5 || j.TotalDeleted != 17 {
		t.Errorf("after the second run: locked_by %v, last_deleted %v, total_deleted %d; want %s's token, 5, 17",
			deref(j.LockedBy), deref(j.LastDeleted), j.TotalDeleted, other.ID())
	}
	if n := b.present(others); n != len(others) {
		t.Errorf("%d failed, pending or processing rows deleted", len(others)-n)
	}
}

// A run deletes at most JanitorBatch rows per statement and goes on until
// a batch comes up short: 35 rows in batches of 10 take four statements.
func TestRetentionDeletesInBoundedBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired := b.aged(35, "sent", "8 days")
	young := b.aged(3, "sent", "6 days")
	r := b.newRelay(&sink{}, relay.Config{JanitorBatch: 10}) // default retention: 7 days
	res := runRetention(t, b.ctx, r)
	if want := (relay.RetentionResult{Ran: true, Deleted: 35, Batches: 4, Complete: true, Vacuumed: true}); res != want {
		t.Fatalf("RunRetention = %+v, want %+v", res, want)
	}
	if n, m := b.present(expired), b.present(young); n != 0 || m != 3 {
		t.Errorf("%d expired rows left, %d young rows left; want 0, 3", n, m)
	}
	if j := b.job(); j.LastDeleted == nil || *j.LastDeleted != 35 || j.TotalDeleted != 35 {
		t.Errorf("last_deleted %v, total_deleted %d; want 35, 35", deref(j.LastDeleted), j.TotalDeleted)
	}
}

// Run runs the janitor every JanitorInterval: rows that expire while the
// relay runs are deleted by a later run.
func TestRelayRunsRetentionEveryInterval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.aged(25, "sent", "2 hours")
	rr := b.startRelay(&sink{}, relay.Config{Retention: time.Hour, JanitorInterval: 20 * time.Millisecond, JanitorBatch: 10})
	await(t, 10*time.Second, func() bool { return b.present(first) == 0 && b.job().TotalDeleted == 25 },
		"the first 25 expired rows were not deleted and counted (total_deleted %d)", b.job().TotalDeleted)
	second := b.aged(13, "sent", "2 hours")
	await(t, 10*time.Second, func() bool { return b.present(second) == 0 && b.job().TotalDeleted == 38 },
		"rows that expired later were not deleted and counted (total_deleted %d)", b.job().TotalDeleted)
	if err := rr.stop(t); err != nil {
		t.Fatal(err)
	}
	if j := b.job(); !j.heldBy(rr.Relay) || j.LockedUntil == nil || j.LockedUntil.After(b.dbNow()) {
		t.Errorf("after Run returned: locked_by %v, locked_until %v; want %s's token, released", deref(j.LockedBy), deref(j.LockedUntil), rr.ID())
	}
}

// One run at a time holds the job: of eight replicas trying at once
// exactly one runs it; and two relays running side by side take turns,
// each claim coming after the previous run released the job and after
// next_run_at, as a trigger on the job row records, and every deleted row
// is counted once.
func TestRetentionJobHeldByOneRunAtATime(t *testing.T) {
	t.Parallel()
	t.Run("simultaneous", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		expired := b.aged(40, "sent", "8 days")
		const replicas = 8
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			results [replicas]relay.RetentionResult
			errs    [replicas]error
		)
		for i := range replicas {
			r := b.newRelay(&sink{}, relay.Config{JanitorBatch: 7})
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = r.RunRetention(b.ctx)
			}()
		}
		close(start)
		wg.Wait()
		ran := 0
		for i, res := range results {
			if errs[i] != nil {
				t.Errorf("replica %d: RunRetention: %v", i, errs[i])
			}
			if res.Ran {
				ran++
				if res.Deleted != 40 || !res.Complete {
					t.Errorf("replica %d ran: %+v, want 40 deleted, complete", i, res)
				}
			} else if res != (relay.RetentionResult{}) {
				t.Errorf("replica %d did not run but reports %+v", i, res)
			}
		}
		if ran != 1 {
			t.Errorf("%d replicas ran the job, want exactly 1", ran)
		}
		if n, j := b.present(expired), b.job(); n != 0 || j.TotalDeleted != 40 {
			t.Errorf("%d expired rows left, total_deleted %d; want 0, 40", n, j.TotalDeleted)
		}
	})

	t.Run("two relays", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		audit := pgx.Identifier{b.table.Schema, "outbox_jobs_audit"}.Sanitize()
		auditFn := pgx.Identifier{b.table.Schema, "outbox_jobs_audit_fn"}.Sanitize()
		for _, stmt := range []string{
			`CREATE TABLE ` + audit + ` (
    at        timestamptz,
    old_by    text,
    old_until timestamptz,
    old_next  timestamptz,
    new_by    text,
    new_total bigint
)`,
			`CREATE FUNCTION ` + auditFn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ` + audit + ` VALUES (now(), OLD.locked_by, OLD.locked_until, OLD.next_run_at, NEW.locked_by, NEW.total_deleted);
    RETURN NULL;
END
$$`,
			`CREATE TRIGGER outbox_jobs_audit AFTER UPDATE ON ` + b.table.Related("jobs") + ` FOR EACH ROW EXECUTE FUNCTION ` + auditFn + `()`,
		} {
			b.exec(stmt)
		}
		claims := func() int {
			var n int
			if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM "+audit+" WHERE new_by IS DISTINCT FROM old_by").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}

		const rows = 95
		expired := b.aged(rows, "sent", "8 days")
		cfg := relay.Config{JanitorInterval: 10 * time.Millisecond, JanitorBatch: 7}
		r1, r2 := b.startRelay(&sink{}, cfg), b.startRelay(&sink{}, cfg)
		await(t, 20*time.Second, func() bool { return b.present(expired) == 0 && claims() >= 10 },
			"after %d runs, %d of %d expired rows are left", claims(), b.present(expired), rows)
		for _, rr := range []*running{r1, r2} {
			if err := rr.stop(t); err != nil {
				t.Fatal(err)
			}
		}

		if j := b.job(); j.TotalDeleted != rows {
			t.Errorf("total_deleted = %d, want %d: a row counted twice or not at all", j.TotalDeleted, rows)
		}
		var overlapping, early int
		if err := b.pool.QueryRow(b.ctx, `SELECT
    count(*) FILTER (WHERE old_until >= at),
    count(*) FILTER (WHERE old_next > at)
FROM `+audit+`
WHERE new_by IS DISTINCT FROM old_by`).Scan(&overlapping, &early); err != nil {
			t.Fatal(err)
		}
		if overlapping != 0 || early != 0 {
			t.Errorf("%d claims while another run held the job, %d claims before next_run_at; want none", overlapping, early)
		}
		var winners []string
		rs, err := b.pool.Query(b.ctx, "SELECT DISTINCT regexp_replace(new_by, '#[0-9]+$', '') FROM "+audit+" ORDER BY 1")
		if err != nil {
			t.Fatal(err)
		}
		if winners, err = pgx.CollectRows(rs, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		for _, w := range winners {
			if w != r1.ID() && w != r2.ID() {
				t.Errorf("the job was held by %q, which is neither relay", w)
			}
		}
		t.Logf("%d runs, by %v", claims(), winners)
	})
}

// lockOutbox holds a SHARE lock on the outbox table until the returned
// function is called: the janitor can claim the job, but its first DELETE
// waits.
func (b *bundle) lockOutbox() (release func()) {
	b.t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "LOCK TABLE "+b.table.Ident()+" IN SHARE MODE"); err != nil {
		b.t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Commit(b.ctx); err != nil {
				b.t.Errorf("release the table lock: %v", err)
			}
		})
	}
	b.t.Cleanup(release)
	return release
}

// startRetention runs RunRetention in a goroutine.
func startRetention(ctx context.Context, r *relay.Relay) <-chan retentionOutcome {
	done := make(chan retentionOutcome, 1)
	go func() {
		res, err := r.RunRetention(ctx)
		done <- retentionOutcome{res, err}
	}()
	return done
}

type retentionOutcome struct {
	res relay.RetentionResult
	err error
}

func awaitOutcome(t *testing.T, done <-chan retentionOutcome) relay.RetentionResult {
	t.Helper()
	select {
	case o := <-done:
		if o.err != nil {
			t.Fatalf("RunRetention: %v", o.err)
		}
		return o.res
	case <-time.After(30 * time.Second):
		t.Fatal("RunRetention did not return within 30s")
	}
	return relay.RetentionResult{}
}

// awaitBlockedDelete waits until a janitor's DELETE waits for a lock on
// the test's table (or, partitioned, one of its partitions).
func (b *bundle) awaitBlockedDelete() {
	b.t.Helper()
	await(b.t, 10*time.Second, func() bool {
		return b.countActivity("wait_event_type = 'Lock' AND query LIKE $1", "DELETE FROM %"+b.table.Schema+"%") == 1
	}, "no janitor DELETE waits for the table lock")
}

// While a run holds the job, the row says who holds it and until when. A
// run whose job another run took over (here by hand, as a replica would
// after this one's lease ran out) stops at its next write: its batch is
// rolled back and the new holder's row is left as it is.
func TestRetentionRunThatLostTheJobStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired := b.aged(30, "sent", "8 days")
	const lease = 20 * time.Second
	r := b.newRelay(&sink{}, relay.Config{JanitorBatch: 10, Lease: lease})
	release := b.lockOutbox()
	done := startRetention(b.ctx, r)
	b.awaitBlockedDelete()

	j := b.job()
	if !j.heldBy(r) || j.LockedUntil == nil {
		t.Fatalf("while running: locked_by %v, locked_until %v; want %s's token and a lease end", deref(j.LockedBy), deref(j.LockedUntil), r.ID())
	}
	if left := j.LockedUntil.Sub(b.dbNow()); !within(left, lease-5*time.Second, lease) {
		t.Errorf("while running the lease ends in %v, want about %v", left, lease)
	}

	var taken jobState
	err := b.pool.QueryRow(b.ctx, `UPDATE `+b.table.Related("jobs")+`
SET locked_by = 'intruder#1',
    locked_until = now() + interval '1 hour',
    last_started_at = now()
WHERE job = 'retention'
RETURNING locked_by, locked_until, last_started_at`).Scan(&taken.LockedBy, &taken.LockedUntil, &taken.LastStartedAt)
	if err != nil {
		t.Fatal(err)
	}
	release()

	res := awaitOutcome(t, done)
	if want := (relay.RetentionResult{Ran: true, LeaseLost: true}); res != want {
		t.Errorf("RunRetention = %+v, want %+v", res, want)
	}
	j = b.job()
	if *j.LockedBy != "intruder#1" || !j.LockedUntil.Equal(*taken.LockedUntil) || !j.LastStartedAt.Equal(*taken.LastStartedAt) ||
		j.LastFinishedAt != nil || j.TotalDeleted != 0 {
		t.Errorf("the new holder's row was overwritten: %+v", j)
	}
	if n := b.present(expired); n != len(expired) {
		t.Errorf("%d rows deleted by a run that had lost the job, want 0 (its batch rolled back)", len(expired)-n)
	}
}

// On cancellation a run finishes the batch under way, deletes no more,
// and releases the job without scheduling the next run, so that any
// replica carries on at once.
func TestRetentionStopsBetweenBatchesOnShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired := b.aged(30, "sent", "8 days")
	r := b.newRelay(&sink{}, relay.Config{JanitorBatch: 10})
	release := b.lockOutbox()
	ctx, cancel := context.WithCancel(b.ctx)
	done := startRetention(ctx, r)
	b.awaitBlockedDelete()
	dueAt := b.job().NextRunAt
	cancel()
	release()

	res := awaitOutcome(t, done)
	if want := (relay.RetentionResult{Ran: true, Deleted: 10, Batches: 1}); res != want {
		t.Errorf("RunRetention = %+v, want %+v", res, want)
	}
	if n := b.present(expired); n != 20 {
		t.Errorf("%d expired rows left, want 20", n)
	}
	j := b.job()
	now := b.dbNow()
	if !j.heldBy(r) || j.LockedUntil == nil || j.LockedUntil.After(now) || !j.NextRunAt.Equal(dueAt) ||
		j.LastFinishedAt != nil || *j.LastDeleted != 10 || j.TotalDeleted != 10 {
		t.Errorf("after a run cut short: %+v; want released (locked_until <= %v), next_run_at still %v, no last_finished_at, 10 counted",
			j, now, dueAt)
	}
	// Still due: the next look of any replica carries on.
	other := b.newRelay(&sink{}, relay.Config{JanitorBatch: 10})
	if res := runRetention(t, b.ctx, other); res.Deleted != 20 || !res.Complete {
		t.Errorf("the next run = %+v, want the other 20 deleted", res)
	}
}

// KeepSent keeps sent rows for ever: RunRetention does nothing, and Run
// never touches the job.
func TestKeepSentDeletesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired := b.aged(10, "sent", "30 days")
	cfg := relay.Config{KeepSent: true, Retention: time.Hour, JanitorInterval: 10 * time.Millisecond}
	if res := runRetention(t, b.ctx, b.newRelay(&sink{}, cfg)); res != (relay.RetentionResult{}) {
		t.Errorf("RunRetention with KeepSent = %+v, want nothing done", res)
	}
	rr := b.startRelay(&sink{}, cfg)
	for range 3 { // the relay works, several janitor intervals long
		id := b.writeN(1, "orders", "fresh")[0]
		await(t, 10*time.Second, func() bool { return b.row(id).Status == "sent" }, "the relay did not send")
	}
	if err := rr.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := b.present(expired); n != len(expired) {
		t.Errorf("KeepSent relay deleted %d rows", len(expired)-n)
	}
	if j := b.job(); j.LockedBy != nil || j.LastStartedAt != nil || j.TotalDeleted != 0 {
		t.Errorf("KeepSent relay touched the job: %+v", j)
	}
}

// logRecorder is a slog.Handler that keeps "LEVEL message" of every record.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}

func (l *logRecorder) has(line string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.lines, line)
}

// A janitor that cannot reach its job (here the jobs table is renamed away)
// logs the error, leaves the relay serving, and does its work once the
// table is back.
func TestRetentionErrorsDoNotStopTheRelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired := b.aged(10, "sent", "8 days")
	jobs := b.table.Related("jobs")
	b.exec("ALTER TABLE " + jobs + " RENAME TO outbox_jobs_away")
	logs := &logRecorder{}
	rr := b.startRelay(&sink{}, relay.Config{JanitorInterval: 10 * time.Millisecond, Logger: slog.New(logs)})
	// A missing table is an error waiting cannot fix: logged at error level.
	const errLine = "ERROR retention janitor: database error; trying again at the next interval"
	await(t, 10*time.Second, func() bool { return logs.has(errLine) }, "the janitor logged no error")
	id := b.writeN(1, "orders", "still served")[0]
	await(t, 10*time.Second, func() bool { return b.row(id).Status == "sent" }, "the relay stopped serving")

	b.exec("ALTER TABLE " + pgx.Identifier{b.table.Schema, "outbox_jobs_away"}.Sanitize() + " RENAME TO outbox_jobs")
	await(t, 10*time.Second, func() bool { return b.present(expired) == 0 }, "the janitor did not recover")
	if err := rr.stop(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

// Migration 004 down drops the jobs table and sent_idx; up creates them
// again, with the retention job due at once, and keeps a sent_idx built
// beforehand by hand.
func TestRetentionMigrationDownAndUp(t *testing.T) {
	t.Parallel()
	pool, table := testdb.NewUnpartitioned(t)
	ctx := context.Background()
	exists := func() (jobs, idx bool) {
		t.Helper()
		err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
			table.Related("jobs"), table.Related("sent_idx")).Scan(&jobs, &idx)
		if err != nil {
			t.Fatal(err)
		}
		return jobs, idx
	}
	if jobs, idx := exists(); !jobs || !idx {
		t.Fatalf("after up: jobs table %v, sent_idx %v; want both", jobs, idx)
	}
	// Later migrations are reverted first.
	for {
		reverted, ok, err := migrations.Down(ctx, pool, table)
		if err != nil || !ok || reverted.Version < 4 {
			t.Fatalf("Down = %03d_%s, %v, %v; want 004_retention reverted", reverted.Version, reverted.Name, ok, err)
		}
		if reverted.Version == 4 {
			if reverted.Name != "retention" {
				t.Fatalf("Down reverted 004_%s, want 004_retention", reverted.Name)
			}
			break
		}
	}
	if jobs, idx := exists(); jobs || idx {
		t.Fatalf("after down: jobs table %v, sent_idx %v; want neither", jobs, idx)
	}
	// An operator may build the index beforehand without blocking writers;
	// the migration keeps it.
	if _, err := pool.Exec(ctx, "CREATE INDEX CONCURRENTLY "+pgx.Identifier{"outbox_sent_idx"}.Sanitize()+
		" ON "+table.Ident()+" (sent_at) WHERE status = 'sent'"); err != nil {
		t.Fatal(err)
	}
	applied, err := migrations.Up(ctx, pool, table)
	if err != nil || len(applied) == 0 || applied[0].Version != 4 {
		t.Fatalf("Up = %v, %v; want 004 applied first", applied, err)
	}
	var due, free bool
	var total int64
	err = pool.QueryRow(ctx, "SELECT next_run_at <= now(), locked_by IS NULL AND locked_until IS NULL, total_deleted FROM "+
		table.Related("jobs")+" WHERE job = 'retention'").Scan(&due, &free, &total)
	if err != nil || !due || !free || total != 0 {
		t.Fatalf("retention job after up: due %v, free %v, total_deleted %d (%v); want due, free, 0", due, free, total, err)
	}
	if err := migrations.Check(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
}

// The janitor's VACUUM (docs/architecture.md#vacuum-after-deleting).

// vacuumStats are the table's counters in pg_stat_all_tables. VACUUM and
// ANALYZE report theirs as they finish; other sessions' row counts arrive
// within about a second of their commits.
type vacuumStats struct {
	Vacuums, Analyzes, DeadTuples int64
}

func (b *bundle) vacuumStats() vacuumStats {
	b.t.Helper()
	var s vacuumStats
	err := b.pool.QueryRow(b.ctx, `SELECT vacuum_count, analyze_count, n_dead_tup
FROM pg_stat_all_tables
WHERE relid = $1::regclass`, b.table.Ident()).Scan(&s.Vacuums, &s.Analyzes, &s.DeadTuples)
	if err != nil {
		b.t.Fatalf("read the table's statistics: %v", err)
	}
	return s
}

// awaitVacuums waits until the table has been vacuumed n times, by hand
// or by a janitor (autovacuum counts apart), and fails if it was more.
func (b *bundle) awaitVacuums(n int64) vacuumStats {
	b.t.Helper()
	await(b.t, 10*time.Second, func() bool { return b.vacuumStats().Vacuums >= n },
		"vacuum_count is %d, want %d", b.vacuumStats().Vacuums, n)
	s := b.vacuumStats()
	if s.Vacuums != n {
		b.t.Fatalf("vacuum_count is %d, want %d", s.Vacuums, n)
	}
	return s
}

// due makes the retention job due again.
func (b *bundle) due() {
	b.t.Helper()
	b.exec("UPDATE " + b.table.Related("jobs") + " SET next_run_at = now()")
}

// newPool opens a pool on the test database for relays; change edits its
// configuration (user, session settings). It is closed when the test ends.
func (b *bundle) newPool(change func(*pgxpool.Config)) *pgxpool.Pool {
	b.t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL(b.t))
	if err != nil {
		b.t.Fatal(err)
	}
	change(cfg)
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(pool.Close)
	return pool
}

// A complete run that deleted rows ends with VACUUM (ANALYZE) of the
// table: its VACUUM and ANALYZE counts go up by one and its dead tuples
// drop.
func TestRetentionVacuumsAfterDeleting(t *testing.T) {
	t.Parallel()
	b := setupUnpartitioned(t)
	b.exec("ALTER TABLE {{table}} SET (autovacuum_enabled = false)")
	failed := b.aged(400, "failed", "1 day")
	b.exec("UPDATE {{table}} SET last_error = 'operator looked' WHERE id = ANY($1)", failed) // 400 dead row versions
	expired := b.aged(100, "sent", "8 days")
	await(t, 10*time.Second, func() bool { return b.vacuumStats().DeadTuples >= 400 },
		"n_dead_tup is %d, want the 400 row versions the update left", b.vacuumStats().DeadTuples)
	// VACUUM removes them only once no transaction that began before the
	// update is still open in the database: a parallel test's lock claim
	// holds one for as long as its publish.
	var since int64
	if err := b.pool.QueryRow(b.ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&since); err != nil {
		t.Fatal(err)
	}
	await(t, 30*time.Second, func() bool {
		return b.countActivity(`datname = current_database() AND pid <> pg_backend_pid()
AND (backend_xid::text::bigint < $1 OR backend_xmin::text::bigint < $1)`, since) == 0
	}, "transactions older than the update still open")
	before := b.vacuumStats()

	res := runRetention(t, b.ctx, b.newRelay(&sink{}, relay.Config{}))
	if want := (relay.RetentionResult{Ran: true, Deleted: 100, Batches: 1, Complete: true, Vacuumed: true}); res != want {
		t.Fatalf("RunRetention = %+v, want %+v", res, want)
	}
	if n := b.present(expired); n != 0 {
		t.Errorf("%d expired rows left", n)
	}
	after := b.awaitVacuums(before.Vacuums + 1)
	if after.Analyzes != before.Analyzes+1 {
		t.Errorf("analyze_count %d -> %d, want one ANALYZE", before.Analyzes, after.Analyzes)
	}
	// What the VACUUM left: none of the 400, and of the 100 just deleted
	// those another session's snapshot may still see, plus those the
	// deleting session reports after the VACUUM: at most 200.
	if after.DeadTuples >= before.DeadTuples {
		t.Errorf("n_dead_tup %d -> %d, want it to drop", before.DeadTuples, after.DeadTuples)
	}
}

// With NoVacuum the janitor deletes and leaves the table to autovacuum;
// a run that deleted nothing does not vacuum either. A last run that
// deletes and vacuums shows the count moving.
func TestRetentionVacuumsOnlyAfterDeletingAndUnlessNoVacuum(t *testing.T) {
	t.Parallel()
	t.Run("NoVacuum", func(t *testing.T) {
		t.Parallel()
		b := setupUnpartitioned(t)
		expired := b.aged(50, "sent", "8 days")
		before := b.vacuumStats()
		res := runRetention(t, b.ctx, b.newRelay(&sink{}, relay.Config{NoVacuum: true}))
		if want := (relay.RetentionResult{Ran: true, Deleted: 50, Batches: 1, Complete: true}); res != want {
			t.Fatalf("RunRetention with NoVacuum = %+v, want %+v", res, want)
		}
		if n := b.present(expired); n != 0 {
			t.Errorf("%d expired rows left", n)
		}
		b.aged(5, "sent", "8 days")
		b.due()
		if res := runRetention(t, b.ctx, b.newRelay(&sink{}, relay.Config{})); !res.Vacuumed {
			t.Fatalf("the control run = %+v, want it vacuumed", res)
		}
		b.awaitVacuums(before.Vacuums + 1)
	})
	t.Run("nothing deleted", func(t *testing.T) {
		t.Parallel()
		b := setupUnpartitioned(t)
		young := b.aged(10, "sent", "1 day")
		before := b.vacuumStats()
		r := b.newRelay(&sink{}, relay.Config{})
		if want, res := (relay.RetentionResult{Ran: true, Batches: 1, Complete: true}), runRetention(t, b.ctx, r); res != want {
			t.Fatalf("RunRetention with nothing expired = %+v, want %+v", res, want)
		}
		b.age(young, "sent", "8 days")
		b.due()
		if res := runRetention(t, b.ctx, r); res.Deleted != 10 || !res.Vacuumed {
			t.Fatalf("the control run = %+v, want 10 deleted and vacuumed", res)
		}
		b.awaitVacuums(before.Vacuums + 1)
	})
}

// newRole creates a login role with the privileges a relay needs on the
// test's tables (its retention janitor included) but not their ownership.
// It is dropped when the test ends.
func (b *bundle) newRole() string {
	b.t.Helper()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	role := "relay_notowner_" + hex.EncodeToString(rnd[:])
	ident := pgx.Identifier{role}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + ident + " LOGIN",
		"GRANT USAGE ON SCHEMA " + pgx.Identifier{b.table.Schema}.Sanitize() + " TO " + ident,
		"GRANT SELECT, UPDATE, DELETE ON " + b.table.Ident() + " TO " + ident,
		"GRANT SELECT, UPDATE ON " + b.table.Related("jobs") + " TO " + ident,
	} {
		b.exec(stmt)
	}
	b.t.Cleanup(func() {
		ctx := context.Background()
		// The role's pool is closed by now (cleanups run last first), but
		// the server may not have ended its sessions yet.
		if _, err := b.pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role); err != nil {
			b.t.Errorf("terminate %s: %v", role, err)
		}
		for _, stmt := range []string{"DROP OWNED BY " + ident, "DROP ROLE " + ident} {
			if _, err := b.pool.Exec(ctx, stmt); err != nil {
				b.t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	return role
}

func (l *logRecorder) count(line string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, got := range l.lines {
		if got == line {
			n++
		}
	}
	return n
}

// A role that does not own the table cannot VACUUM it: PostgreSQL skips
// the table with a mere warning. The janitor finds out before trying,
// logs it once for the Relay and does not try again; the deletes go on.
func TestRetentionRoleThatDoesNotOwnTheTableDoesNotVacuum(t *testing.T) {
	t.Parallel()
	b := setupUnpartitioned(t)
	role := b.newRole()
	pool := b.newPool(func(c *pgxpool.Config) { c.ConnConfig.User = role })
	logs := &logRecorder{}
	r, err := relay.New(pool, &sink{}, b.config(relay.Config{Logger: slog.New(logs)}))
	if err != nil {
		t.Fatal(err)
	}
	before := b.vacuumStats()
	for i, n := range []int64{20, 7} {
		if i > 0 {
			b.due()
		}
		expired := b.aged(int(n), "sent", "8 days")
		res := runRetention(t, b.ctx, r)
		if want := (relay.RetentionResult{Ran: true, Deleted: n, Batches: 1, Complete: true}); res != want {
			t.Fatalf("run %d: RunRetention = %+v, want %+v", i+1, res, want)
		}
		if left := b.present(expired); left != 0 {
			t.Errorf("run %d: %d expired rows left", i+1, left)
		}
	}
	const warning = "WARN retention janitor cannot VACUUM the table: the role does not own it; relying on autovacuum"
	if n := logs.count(warning); n != 1 {
		t.Errorf("%d warnings %q over two runs, want 1; logged:\n%s", n, warning, strings.Join(logs.lines, "\n"))
	}

	// The premise: this role's VACUUM succeeds and does nothing. The
	// owner's VACUUM then is the first one the table counts.
	if _, err := pool.Exec(b.ctx, "VACUUM "+b.table.Ident()); err != nil {
		t.Fatalf("VACUUM as %s: %v", role, err)
	}
	b.exec("VACUUM {{table}}")
	b.awaitVacuums(before.Vacuums + 1)
}

// A VACUUM that fails (here its ANALYZE, on an expression index whose
// function raises within a VACUUM statement only) is logged and reported
// in VacuumErr; RunRetention returns no error, the deletes stand, the next
// run tries again, and Run goes on serving and deleting.
func TestRetentionVacuumErrorsDoNotStopTheJanitor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.aged(5, "sent", "1 hour") // rows for ANALYZE to sample, kept
	trap := pgx.Identifier{b.table.Schema, "analyze_trap"}.Sanitize()
	b.exec(`CREATE FUNCTION ` + trap + `(bytea) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF current_query() LIKE 'VACUUM%' THEN
        RAISE EXCEPTION 'analyze trap';
    END IF;
    RETURN length($1);
END
$$`)
	b.exec("CREATE INDEX outbox_trap_idx ON {{table}} ((" + trap + "(payload)))")
	logs := &logRecorder{}
	cfg := relay.Config{JanitorInterval: 10 * time.Millisecond, Logger: slog.New(logs)}
	r := b.newRelay(&sink{}, cfg)
	const warning = "WARN retention janitor: VACUUM failed; trying again after the next run that deletes rows"
	for i := range 2 {
		if i > 0 {
			b.due()
		}
		expired := b.aged(10, "sent", "8 days")
		res, err := r.RunRetention(b.ctx)
		if err != nil {
			t.Fatalf("run %d: RunRetention = %v, want no error", i+1, err)
		}
		if res.Deleted != 10 || !res.Complete || res.Vacuumed || res.VacuumErr == nil || !strings.Contains(res.VacuumErr.Error(), "analyze trap") {
			t.Fatalf("run %d: RunRetention = %+v, want 10 deleted, complete, not vacuumed, the trap's error", i+1, res)
		}
		if n := b.present(expired); n != 0 {
			t.Errorf("run %d: %d expired rows left", i+1, n)
		}
		if n := logs.count(warning); n != i+1 {
			t.Errorf("after run %d: %d warnings %q, want %d", i+1, n, warning, i+1)
		}
	}

	b.due()
	rr := b.startRelay(&sink{}, cfg)
	expired := b.aged(10, "sent", "8 days")
	await(t, 10*time.Second, func() bool { return b.present(expired) == 0 && logs.count(warning) >= 3 },
		"Run's janitor did not delete and try to vacuum (%d warnings)", logs.count(warning))
	id := b.writeN(1, "orders", "still served")[0]
	await(t, 10*time.Second, func() bool { return b.row(id).Status == "sent" }, "the relay stopped serving")
	if err := rr.stop(t); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}

// Shutdown during the VACUUM (made slow by cost-based delay in the relay's
// sessions) ends RunRetention at once and cancels the VACUUM on the
// server, which dropping the connection alone would not.
func TestRetentionShutdownCancelsTheVacuum(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired := b.aged(3000, "sent", "8 days")
	pool := b.newPool(func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["vacuum_cost_delay"] = "100"
		c.ConnConfig.RuntimeParams["vacuum_cost_limit"] = "1"
	})
	r, err := relay.New(pool, &sink{}, b.config(relay.Config{JanitorBatch: 5000}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	done := startRetention(ctx, r)
	vacuuming := func() int {
		return b.countActivity("state = 'active' AND query = $1", "VACUUM (SKIP_LOCKED, ANALYZE, TRUNCATE false) "+b.table.Ident())
	}
	await(t, 10*time.Second, func() bool { return vacuuming() == 1 }, "the janitor's VACUUM did not start")
	cancel()
	start := time.Now()
	res := awaitOutcome(t, done)
	if took := time.Since(start); took > 20*time.Second { // the VACUUM itself would take many minutes
		t.Errorf("RunRetention returned %v after cancellation, want at once", took)
	}
	if !res.Ran || res.Deleted != 3000 || !res.Complete || res.Vacuumed || res.VacuumErr == nil {
		t.Errorf("RunRetention = %+v, want 3000 deleted, complete, the VACUUM cut short", res)
	}
	if n := b.present(expired); n != 0 {
		t.Errorf("%d expired rows left", n)
	}
	await(t, time.Minute, func() bool { return vacuuming() == 0 }, "the server goes on vacuuming after the relay gave up")
}

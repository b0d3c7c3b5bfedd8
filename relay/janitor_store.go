package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of the retention janitor (docs/architecture.md#retention).
// {{jobs}} is the jobs table of migration 004, {{table}} the outbox table.
// In the job's statements $1 is the job's name and, but for the claim, $2
// the token of the run that holds it: every write after the claim is
// fenced by it.
const (
	// claimJobSQL starts a run when the job is due and nobody holds it, in
	// one statement. Of replicas trying at once, the first takes the row
	// lock; the others wait for it, re-check the row once it commits and
	// find it held. last_deleted counts the new run's rows from 0.
	claimJobSQL = `UPDATE {{jobs}}
SET locked_by = $2,
    locked_until = now() + $3 * interval '1 millisecond',
    last_started_at = now(),
    last_deleted = 0
WHERE job = $1
  AND next_run_at <= now()
  AND (locked_until IS NULL OR locked_until < now())
RETURNING job`

	// deleteSentSQL deletes up to $2 sent rows older than the retention
	// ($1 ms), oldest first. The inner scan reads sent_idx from its low
	// end and stops after the batch; SKIP LOCKED steps over rows someone
	// else holds (an operator's transaction, or a janitor whose lease ran
	// out and which is about to find that out). Failed, pending and
	// processing rows are not in the index and never match. The ids are
	// an array, not an IN (subquery): the planner then deletes them by
	// primary key, where IN let it hash-join against a scan of the whole
	// table.
	deleteSentSQL = `DELETE FROM {{table}}
WHERE id = ANY (ARRAY(
    SELECT id
    FROM {{table}}
    WHERE status = 'sent'
      AND sent_at < now() - $1 * interval '1 millisecond'
    ORDER BY sent_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
))`

	// recordBatchSQL runs in the transaction of a batch's DELETE: it counts
	// the batch ($4 rows) and extends the lease ($3 ms). When the run no
	// longer holds the job it matches nothing, and the batch is rolled
	// back.
	recordBatchSQL = `UPDATE {{jobs}}
SET locked_until = now() + $3 * interval '1 millisecond',
    last_deleted = last_deleted + $4,
    total_deleted = total_deleted + $4
WHERE job = $1
  AND locked_by = $2`

	// finishJobSQL ends a run: the job is released (locked_until = now(),
	// locked_by kept as a record of who ran last). A complete run ($3)
	// records when it finished and schedules the next run $4 ms later; a
	// run cut short leaves next_run_at as it was, already due, so that
	// another replica carries on at its next look.
	finishJobSQL = `UPDATE {{jobs}}
SET locked_until = now(),
    last_finished_at = CASE WHEN $3::bool THEN now() ELSE last_finished_at END,
    next_run_at = CASE WHEN $3::bool THEN now() + $4 * interval '1 millisecond' ELSE next_run_at END
WHERE job = $1
  AND locked_by = $2`

	// mayVacuumSQL says whether the session's role may VACUUM the table
	// named $1: it has the privileges of the table's owner or of the
	// database's (superusers have every role's), or, from PostgreSQL 17,
	// MAINTAIN on the table. Any other role's VACUUM skips the table with
	// a WARNING and succeeds. The CASE keeps 'MAINTAIN', unknown before
	// 17, from being parsed there.
	mayVacuumSQL = `SELECT pg_has_role(c.relowner, 'USAGE')
    OR pg_has_role(d.datdba, 'USAGE')
    OR CASE WHEN current_setting('server_version_num')::int >= 170000
        THEN has_table_privilege(c.oid, 'MAINTAIN')
        ELSE false
    END
FROM pg_class AS c
JOIN pg_database AS d ON d.datname = current_database()
WHERE c.oid = '{{table}}'::regclass`

	// vacuumSQL reclaims the space of deleted rows and refreshes the
	// table's statistics. SKIP_LOCKED skips the table while another
	// VACUUM, or DDL, holds a conflicting lock, rather than wait for it.
	vacuumSQL = `VACUUM (SKIP_LOCKED, ANALYZE) {{table}}`
)

// jobRetention is the retention job's row in the jobs table (migration 004
// creates it).
const jobRetention = "retention"

// claimJob starts a run of job for owner, with a lease of one Lease; ok is
// false when the job is not due or another run holds it.
func (s *store) claimJob(ctx context.Context, job, owner string) (ok bool, err error) {
	var claimed string
	err = s.pool.QueryRow(ctx, s.sql["claimJob"], job, owner, s.lease.Milliseconds()).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim job %s: %w", job, err)
	}
	return true, nil
}

// deleteSent deletes up to limit sent rows older than retention for the
// run owner of the retention job, counts them in the job row and extends
// the run's lease, in one transaction. held is false, and nothing is
// deleted, when owner no longer holds the job.
func (s *store) deleteSent(ctx context.Context, owner string, retention time.Duration, limit int) (deleted int64, held bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	tag, err := tx.Exec(ctx, s.sql["deleteSent"], retention.Milliseconds(), limit)
	if err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	deleted = tag.RowsAffected()
	tag, err = tx.Exec(ctx, s.sql["recordBatch"], jobRetention, owner, s.lease.Milliseconds(), deleted)
	if err != nil {
		return 0, false, fmt.Errorf("record deleted rows: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return 0, false, nil // fenced out: the deferred Rollback undoes the DELETE
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("delete sent rows: commit: %w", err)
	}
	return deleted, true, nil
}

// finishJob releases job held by owner; complete schedules the next run
// interval after now. held is false when owner no longer held the job.
func (s *store) finishJob(ctx context.Context, job, owner string, complete bool, interval time.Duration) (held bool, err error) {
	tag, err := s.pool.Exec(ctx, s.sql["finishJob"], job, owner, complete, interval.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("finish job %s: %w", job, err)
	}
	return tag.RowsAffected() == 1, nil
}

// vacuum runs VACUUM on table unless the role may not; allowed is false,
// and nothing runs, then. VACUUM cannot run in a transaction: pgx sends a
// statement without arguments as one simple query, which runs on its own.
// When ctx ends first pgx asks the server to cancel the statement (a
// dropped connection would not stop a VACUUM) and drops the connection.
func (s *store) vacuum(ctx context.Context) (allowed bool, err error) {
	if err := s.pool.QueryRow(ctx, s.sql["mayVacuum"]).Scan(&allowed); err != nil {
		return false, fmt.Errorf("vacuum: check the privilege: %w", err)
	}
	if !allowed {
		return false, nil
	}
	if _, err := s.pool.Exec(ctx, s.sql["vacuum"]); err != nil {
		return true, fmt.Errorf("vacuum: %w", err)
	}
	return true, nil
}

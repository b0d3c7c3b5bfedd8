package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/migrations"
)

// The store's statements of the retention janitor
// (docs/architecture.md#retention).

// jobRetention is the retention job's row in the jobs table (migration 004
// creates it), and jobPartitions the job that creates the partitions of a
// partitioned table ahead of time (created with the table).
const (
	jobRetention  = "retention"
	jobPartitions = "partitions"
)

// partitionLockTimeout bounds how long the janitor waits for the locks
// that creating and dropping partitions take. Writers and claims queue
// behind a lock request that waits (docs/architecture.md#partitioned-tables):
// the janitor gives up after this long and tries again at its next run.
const partitionLockTimeout = 250 * time.Millisecond

// ClaimJob starts a run of job for owner, with a lease of one Lease; ok is
// false when the job is not due or another run holds it.
func (s *pgStore) ClaimJob(ctx context.Context, job, owner string) (ok bool, err error) {
	var claimed string
	err = s.pool.QueryRow(ctx, s.q.claimJob, job, owner, s.lease.Milliseconds()).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim job %s: %w", job, err)
	}
	return true, nil
}

// DeleteSent deletes up to limit sent rows older than retention from
// target (the table, or one of its partitions: a quoted, qualified name)
// for the run owner of the retention job, counts them in the job row and
// extends the run's lease, in one transaction. held is false, and nothing
// is deleted, when owner no longer holds the job.
func (s *pgStore) DeleteSent(ctx context.Context, owner, target string, retention time.Duration, limit int) (deleted int64, held bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	query := s.q.deleteSent
	if target != s.table.Ident() {
		query = strings.ReplaceAll(query, s.table.Ident(), target)
	}
	tag, err := tx.Exec(ctx, query, retention.Milliseconds(), limit)
	if err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	deleted = tag.RowsAffected()
	tag, err = tx.Exec(ctx, s.q.recordBatch, jobRetention, owner, s.lease.Milliseconds(), deleted)
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

// partitioned reports whether the table is partitioned, and the database
// clock's now().
func (s *pgStore) partitioned(ctx context.Context) (bool, time.Time, error) {
	p, err := migrations.IsPartitioned(ctx, s.pool, s.table)
	if err != nil {
		return false, time.Time{}, err
	}
	var now time.Time
	if err := s.pool.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return false, time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return p, now, nil
}

// inJob runs fn in a transaction with partitionLockTimeout as its
// lock_timeout and commits it if owner still holds job; fn returns the
// rows to count in the job row. held is false, and fn's changes are rolled
// back, when owner no longer holds it. A lock fn could not get in time is
// no error: waited is true, nothing changes, and the caller tries again
// at its next run.
func (s *pgStore) inJob(ctx context.Context, job, owner string, fn func(pgx.Tx) (int64, error)) (held, waited bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", partitionLockTimeout.Milliseconds())); err != nil {
		return false, false, err
	}
	n, err := fn(tx)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return true, true, nil
		}
		return false, false, err
	}
	tag, err := tx.Exec(ctx, s.q.recordBatch, job, owner, s.lease.Milliseconds(), n)
	if err != nil {
		return false, false, fmt.Errorf("record job %s: %w", job, err)
	}
	if tag.RowsAffected() == 0 {
		return false, false, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return false, false, fmt.Errorf("commit job %s: %w", job, err)
	}
	return true, false, nil
}

// FinishJob releases job held by owner; complete schedules the next run
// interval after now. held is false when owner no longer held the job.
func (s *pgStore) FinishJob(ctx context.Context, job, owner string, complete bool, interval time.Duration) (held bool, err error) {
	tag, err := s.pool.Exec(ctx, s.q.finishJob, job, owner, complete, interval.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("finish job %s: %w", job, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Vacuum runs VACUUM on table unless the role may not; allowed is false,
// and nothing runs, then. VACUUM cannot run in a transaction: pgx sends a
// statement without arguments as one simple query, which runs on its own.
// When ctx ends first pgx asks the server to cancel the statement (a
// dropped connection would not stop a VACUUM) and drops the connection.
func (s *pgStore) Vacuum(ctx context.Context) (allowed bool, err error) {
	if err := s.pool.QueryRow(ctx, s.q.mayVacuum).Scan(&allowed); err != nil {
		return false, fmt.Errorf("vacuum: check the privilege: %w", err)
	}
	if !allowed {
		return false, nil
	}
	if _, err := s.pool.Exec(ctx, s.q.vacuum); err != nil {
		return true, fmt.Errorf("vacuum: %w", err)
	}
	return true, nil
}

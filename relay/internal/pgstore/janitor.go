package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The store's statements of the retention janitor
// (docs/architecture.md#retention).

// ClaimJob starts a run of job for owner, with a lease of one Lease; ok is
// false when the job is not due or another run holds it.
func (s *Store) ClaimJob(ctx context.Context, job, owner string) (ok bool, err error) {
	var claimed string
	args := pgx.StrictNamedArgs{"job": job, "owner": owner, "lease_ms": s.lease.Milliseconds()}
	err = s.pool.QueryRow(ctx, s.q.claimJob, args).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim job %s: %w", job, err)
	}
	return true, nil
}

// DeleteSent deletes up to limit sent rows older than retention from
// partition ("" is the whole table) for the run owner of the retention
// job, counts them in the job row and extends the run's lease, in one
// transaction. held is false, and nothing is deleted, when owner no
// longer holds the job.
func (s *Store) DeleteSent(ctx context.Context, owner, partition string, retention time.Duration, limit int) (deleted int64, held bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	query := s.q.deleteSent
	if partition != "" {
		query = strings.ReplaceAll(query, s.table.Ident(), pgx.Identifier{s.table.WithDefaults().Schema, partition}.Sanitize())
	}
	tag, err := tx.Exec(ctx, query, pgx.StrictNamedArgs{"retention_ms": retention.Milliseconds(), "limit": limit})
	if err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	deleted = tag.RowsAffected()
	tag, err = tx.Exec(ctx, s.q.recordBatch, pgx.StrictNamedArgs{"job": store.JobRetention, "owner": owner,
		"lease_ms": s.lease.Milliseconds(), "deleted": deleted})
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

// FinishJob releases job held by owner; complete schedules the next run
// interval after now. held is false when owner no longer held the job.
func (s *Store) FinishJob(ctx context.Context, job, owner string, complete bool, interval time.Duration) (held bool, err error) {
	tag, err := s.pool.Exec(ctx, s.q.finishJob, pgx.StrictNamedArgs{"job": job, "owner": owner, "complete": complete,
		"interval_ms": interval.Milliseconds()})
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
func (s *Store) Vacuum(ctx context.Context) (allowed bool, err error) {
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

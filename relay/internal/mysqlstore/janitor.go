package mysqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// ClaimJob starts a run of job for owner, with a lease of one Lease; ok is
// false when the job is not due or another run holds it.
func (s *Store) ClaimJob(ctx context.Context, job, owner string) (ok bool, err error) {
	res, err := s.db.ExecContext(ctx, s.q.claimJob, owner, s.lease.Milliseconds(), job)
	if err != nil {
		return false, fmt.Errorf("claim job %s: %w", job, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("claim job %s: %w", job, err)
	}
	return n == 1, nil
}

// DeleteSent deletes up to limit sent rows older than retention for the
// run owner of the retention job, counts them in the job row and extends
// the run's lease, in one transaction. held is false, and nothing is
// deleted, when owner no longer holds the job. MySQL outbox tables have no
// partitions: partition must be "".
func (s *Store) DeleteSent(ctx context.Context, owner, partition string, retention time.Duration, limit int) (deleted int64, held bool, err error) {
	if partition != "" {
		return 0, false, fmt.Errorf("delete sent rows: %s is a partition: MySQL outbox tables have none", partition)
	}
	tx, err := s.db.BeginTx(ctx, claimTx)
	if err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	rs, err := tx.QueryContext(ctx, s.q.pickSent, retention.Milliseconds(), limit)
	if err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	var ids [][16]byte
	for rs.Next() {
		var id []byte
		if err := rs.Scan(&id); err != nil {
			rs.Close()
			return 0, false, fmt.Errorf("delete sent rows: %w", err)
		}
		ids = append(ids, [16]byte(id))
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return 0, false, fmt.Errorf("delete sent rows: %w", err)
	}
	if len(ids) > 0 {
		res, err := tx.ExecContext(ctx, expand(s.q.deleteSent, len(ids)), idArgs(ids)...)
		if err != nil {
			return 0, false, fmt.Errorf("delete sent rows: %w", err)
		}
		if deleted, err = res.RowsAffected(); err != nil {
			return 0, false, fmt.Errorf("delete sent rows: %w", err)
		}
	}
	res, err := tx.ExecContext(ctx, s.q.recordBatch, s.lease.Milliseconds(), deleted, deleted, store.JobRetention, owner)
	if err != nil {
		return 0, false, fmt.Errorf("record deleted rows: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, false, err // fenced out: the deferred Rollback undoes the DELETE
	}
	if err := tx.Commit(); err != nil {
		return 0, false, fmt.Errorf("delete sent rows: commit: %w", err)
	}
	return deleted, true, nil
}

// FinishJob releases job held by owner; complete schedules the next run
// interval after now. held is false when owner no longer held the job.
func (s *Store) FinishJob(ctx context.Context, job, owner string, complete bool, interval time.Duration) (held bool, err error) {
	res, err := s.db.ExecContext(ctx, s.q.finishJob, complete, complete, interval.Milliseconds(), job, owner)
	if err != nil {
		return false, fmt.Errorf("finish job %s: %w", job, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("finish job %s: %w", job, err)
	}
	return n == 1, nil
}

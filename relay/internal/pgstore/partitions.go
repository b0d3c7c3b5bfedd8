package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The store's steps of a partitioned table's jobs
// (docs/architecture.md#partitioned-tables): reading its partitions,
// dropping expired ones, creating those ahead of the clock.

// Partitioning reads the table's partitions and the database clock's
// now(); ok is false on a table that is not partitioned.
func (s *Store) Partitioning(ctx context.Context) (p store.Partitioning, ok bool, err error) {
	if ok, err = migrations.IsPartitioned(ctx, s.pool, s.table); err != nil || !ok {
		return store.Partitioning{}, false, err
	}
	if err := s.pool.QueryRow(ctx, "SELECT now()").Scan(&p.Now); err != nil {
		return store.Partitioning{}, false, fmt.Errorf("read the database clock: %w", err)
	}
	parts, err := migrations.Partitions(ctx, s.pool, s.table)
	if err != nil {
		return store.Partitioning{}, false, err
	}
	for _, x := range parts {
		p.Parts = append(p.Parts, store.Partition{Name: x.Name, From: x.From, To: x.To})
	}
	if p.Default, _, err = migrations.DefaultPartition(ctx, s.pool, s.table); err != nil {
		return store.Partitioning{}, false, err
	}
	return p, true, nil
}

// DropPartition drops p if every row in it was sent before cutoff
// (migrations.DropPartition), in a transaction fenced by job (inJob).
func (s *Store) DropPartition(ctx context.Context, job, owner string, p store.Partition, cutoff time.Time) (dropped bool, rows int64, step store.JobStep, err error) {
	step, err = s.inJob(ctx, job, owner, func(tx pgx.Tx) (int64, error) {
		var err error
		dropped, rows, err = migrations.DropPartition(ctx, tx, s.table, migrations.Partition{Name: p.Name, From: p.From, To: p.To}, cutoff)
		return rows, err
	})
	if err != nil || !step.Held || step.Waited {
		return false, 0, step, err
	}
	return dropped, rows, step, nil
}

// CreatePartitions creates the partitions missing from the current
// interval up to ahead past now (migrations.CreatePartitions), in a
// transaction fenced by job (inJob).
func (s *Store) CreatePartitions(ctx context.Context, job, owner string, ahead time.Duration) (created []string, step store.JobStep, err error) {
	step, err = s.inJob(ctx, job, owner, func(tx pgx.Tx) (int64, error) {
		made, err := migrations.CreatePartitions(ctx, tx, s.table, 0, ahead)
		for _, p := range made {
			created = append(created, p.Name)
		}
		return 0, err
	})
	if err != nil || !step.Held || step.Waited {
		return nil, step, err
	}
	return created, step, nil
}

// inJob runs fn in a transaction with store.PartitionLockTimeout as its
// lock_timeout and commits it if owner still holds job; fn returns the
// rows to count in the job row. step.Held is false, and fn's changes are
// rolled back, when owner no longer holds it. A lock fn could not get in
// time is no error: step.Waited is true, nothing changes, and the caller
// tries again at its next run.
func (s *Store) inJob(ctx context.Context, job, owner string, fn func(pgx.Tx) (int64, error)) (step store.JobStep, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.JobStep{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", store.PartitionLockTimeout.Milliseconds())); err != nil {
		return store.JobStep{}, err
	}
	n, err := fn(tx)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return store.JobStep{Held: true, Waited: true}, nil
		}
		return store.JobStep{}, err
	}
	tag, err := tx.Exec(ctx, s.q.recordBatch, pgx.StrictNamedArgs{"job": job, "owner": owner,
		"lease_ms": s.lease.Milliseconds(), "deleted": n})
	if err != nil {
		return store.JobStep{}, fmt.Errorf("record job %s: %w", job, err)
	}
	if tag.RowsAffected() == 0 {
		return store.JobStep{}, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return store.JobStep{}, fmt.Errorf("commit job %s: %w", job, err)
	}
	return store.JobStep{Held: true}, nil
}

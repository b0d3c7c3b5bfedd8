package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// RetentionResult says what one call of RunRetention did.
type RetentionResult struct {
	// Ran is true when the call held the retention job: it was due and no
	// other run held it.
	Ran bool
	// Deleted counts the sent rows the run deleted. Each batch is counted
	// in the job row (last_deleted, total_deleted) in the transaction that
	// deletes it.
	Deleted int64
	// Batches counts the DELETE statements that committed.
	Batches int
	// Complete is true when the run went on until a batch found fewer than
	// JanitorBatch expired rows; the next run is then due JanitorInterval
	// later. A run stopped by ctx, a lost lease or an error is not
	// complete and leaves the job due for any replica.
	Complete bool
	// LeaseLost is true when another run held the job by the time this one
	// wrote to it (its lease had ended): this run stopped, the batch it was
	// deleting then was rolled back, and the job row is the new holder's.
	LeaseLost bool
	// Vacuumed is true when a VACUUM (SKIP_LOCKED, ANALYZE, TRUNCATE false) of the table
	// followed the run and succeeded. One follows a complete run that
	// deleted rows, unless NoVacuum is set or the relay's role may not
	// vacuum the table. SKIP_LOCKED makes PostgreSQL skip the table,
	// without an error, while another session holds a conflicting lock
	// (autovacuum, another replica's VACUUM, DDL).
	Vacuumed bool
	// VacuumErr is why that VACUUM failed, if it did; a shutdown during
	// it makes it fail too. RunRetention logs the error and does not
	// return it: the deletes stand, and the next run that deletes rows
	// tries again.
	VacuumErr error
	// Dropped counts the partitions of a partitioned table that the run
	// dropped, and DroppedRows is the statistics system's count of the
	// rows they held (n_live_tup) (counted in the job row's total_deleted too). Each drop is
	// logged with the partition's name.
	Dropped     int
	DroppedRows int64
	// LockWaited is true when the lock to drop a partition was not free
	// within 250ms: the run stopped there, is not
	// complete, and the next run tries again.
	LockWaited bool
	// Kept counts the expired partitions the run kept because some of
	// their rows are pending, processing or failed, or were sent within
	// Retention; their sent rows past Retention are deleted row by row.
	Kept int
}

// vacuumTimeout bounds the janitor's VACUUM. A manual VACUUM is not
// throttled and skips the pages the visibility map says need nothing, so
// it takes seconds even on a large table; ctx ending cancels it sooner.
const vacuumTimeout = 10 * time.Minute

// retention is the retention service: it deletes sent rows older than
// Retention, and drops a partitioned table's expired partitions, in runs
// that hold the retention job (RunRetention), every JanitorInterval.
type retention struct {
	cfg     Config
	store   store.Store
	parts   store.Partitions // nil where the table is never partitioned (MySQL)
	vacuums store.Vacuumer   // nil where the database vacuums alone (MySQL)
	log     *slog.Logger
	tokens  *tokens
	observe func(Event)
	// vacuumDenied: the role may not VACUUM the table; the service warned
	// once and leaves it to autovacuum.
	vacuumDenied atomic.Bool
}

// loop runs the service at once and then every JanitorInterval until ctx
// ends. Errors are logged and retried at the next run; they never stop
// the relay.
func (j *retention) loop(ctx context.Context) {
	every(ctx, j.cfg.JanitorInterval, func() {
		if res, err := j.run(ctx); err != nil && ctx.Err() == nil {
			level := slog.LevelWarn
			if j.store.Fatal(err) {
				// Say it louder: the relay's role may lack DELETE on the
				// table, or the schema be older than the relay.
				level = slog.LevelError
			}
			j.log.Log(ctx, level, "retention janitor: database error; trying again at the next interval",
				"error", err, "deleted", res.Deleted, "retry_in", j.cfg.JanitorInterval)
		}
	})
}

// run is RunRetention.
func (j *retention) run(ctx context.Context) (RetentionResult, error) {
	var res RetentionResult
	if j.cfg.KeepSent || ctx.Err() != nil {
		return res, nil
	}
	owner := j.tokens.next()
	// Detached like the row claim, within the shutdown bound: a claim
	// whose answer was lost to a cancellation would hold the job until its
	// lease ends.
	hard, stopHard := shutdownBound(ctx, j.cfg)
	defer stopHard()
	cctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
	ok, err := j.store.ClaimJob(cctx, store.JobRetention, owner)
	cancel()
	if err != nil || !ok {
		return res, err
	}
	res.Ran = true
	start := time.Now()
	targets, err := j.dropPartitions(ctx, hard, owner, &res)
	if err != nil {
		j.finish(hard, owner, &res)
		return res, err
	}
	done := 0 // targets with no expired row left
targets:
	for _, target := range targets {
		for !res.LeaseLost && ctx.Err() == nil {
			bctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
			n, held, err := j.store.DeleteSent(bctx, owner, target, j.cfg.Retention, j.cfg.JanitorBatch)
			cancel()
			if err != nil {
				j.finish(hard, owner, &res)
				return res, err
			}
			if !held {
				res.LeaseLost = true
				break targets
			}
			res.Batches++
			res.Deleted += n
			if n < int64(j.cfg.JanitorBatch) {
				done++
				break
			}
		}
	}
	res.Complete = done == len(targets) && !res.LeaseLost && !res.LockWaited && ctx.Err() == nil
	if !res.LeaseLost {
		j.finish(hard, owner, &res)
	}
	took := time.Since(start)
	j.observe(Event{Kind: EventJanitorRan, Rows: int(res.Deleted), Duration: took})
	var vacuumTook time.Duration
	if res.Complete && res.Deleted > 0 {
		vacuumTook = j.vacuum(ctx, &res)
	}
	level := slog.LevelInfo
	if res.Deleted == 0 {
		level = slog.LevelDebug
	}
	j.log.Log(ctx, level, "retention run", "deleted", res.Deleted, "batches", res.Batches, "dropped_partitions", res.Dropped, "duration", took,
		"complete", res.Complete, "vacuumed", res.Vacuumed, "vacuum_duration", vacuumTook, "retention", j.cfg.Retention, "token", owner)

	if res.LeaseLost {
		j.log.Warn("retention job lost to another run; stopped", "token", owner, "deleted", res.Deleted)
	}
	return res, nil
}

// dropPartitions drops, on a partitioned table, the partitions whose
// events were all made more than Retention ago, oldest first, each in a
// transaction of its own fenced by the job, unless some of their rows are
// not sent or were sent within Retention (migrations.DropPartition); those
// are kept (res.Kept). It returns where the row deletes that follow look
// for expired sent rows, as partition names: the partitions kept and the
// DEFAULT partition, never a partition that is not expired yet (it is
// dropped whole later); on an unpartitioned table, "" (the table). A
// partition whose lock was not free in time (res.LockWaited) ends the
// drops of this run.
func (j *retention) dropPartitions(ctx, hard context.Context, owner string, res *RetentionResult) (targets []string, err error) {
	if j.parts == nil {
		return []string{""}, nil
	}
	lctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
	defer cancel()
	table, partitioned, err := j.parts.Partitioning(lctx)
	if err != nil || !partitioned {
		return []string{""}, err
	}
	if table.Default != "" {
		targets = append(targets, table.Default)
	}
	cutoff := table.Now.Add(-j.cfg.Retention)
	for _, p := range table.Parts {
		if p.To.After(cutoff) || ctx.Err() != nil {
			break
		}
		dctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
		dropped, rows, step, err := j.parts.DropPartition(dctx, store.JobRetention, owner, p, cutoff)
		cancel()
		switch {
		case err != nil:
			return targets, fmt.Errorf("drop partition %s: %w", p.Name, err)
		case !step.Held:
			res.LeaseLost = true
			return targets, nil
		case step.Waited:
			res.LockWaited = true
			j.log.Info("retention janitor: the lock to drop a partition was not free in time; trying again at the next run",
				"partition", p.Name, "lock_timeout", store.PartitionLockTimeout)
			return targets, nil
		case dropped:
			res.Dropped++
			res.DroppedRows += rows
			j.log.Info("retention janitor: dropped a partition", "partition", p.Name, "rows_estimate", rows, "token", owner)
		default:
			res.Kept++
			j.log.Debug("retention janitor: kept an expired partition that holds unfinished or recently sent rows", "partition", p.Name)
			targets = append(targets, p.Name)
		}
	}
	return targets, nil
}

// finishRetention releases the job held by owner; a complete run schedules
// the next one. It runs under hard (the run's shutdown bound), for at most
// one lease. A failure is only logged: the lease ends on its own.
func (j *retention) finish(hard context.Context, owner string, res *RetentionResult) {
	fctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
	defer cancel()
	held, err := j.store.FinishJob(fctx, store.JobRetention, owner, res.Complete, j.cfg.JanitorInterval)
	switch {
	case err != nil:
		j.log.Warn("releasing the retention job failed; it returns when its lease ends", "token", owner, "error", err)
	case !held:
		res.LeaseLost, res.Complete = true, false // the next run is the new holder's to schedule
	}
}

// vacuum runs VACUUM (SKIP_LOCKED, ANALYZE, TRUNCATE false) on the table after a run that
// deleted rows, unless NoVacuum is set, ctx has ended or the role was found
// unable to vacuum the table. The job is released by then: the VACUUM
// holds nothing another run needs. It records the outcome in res and
// returns how long the VACUUM took. A failure is logged, never returned
// nor fatal.
func (j *retention) vacuum(ctx context.Context, res *RetentionResult) time.Duration {
	if j.cfg.NoVacuum || j.vacuumDenied.Load() || ctx.Err() != nil || j.vacuums == nil {
		return 0
	}
	vctx, cancel := context.WithTimeout(ctx, vacuumTimeout)
	defer cancel()
	start := time.Now()
	allowed, err := j.vacuums.Vacuum(vctx)
	took := time.Since(start)
	switch {
	case err != nil:
		res.VacuumErr = err
		if ctx.Err() == nil { // a shutdown is no failure worth a warning
			j.log.Warn("retention janitor: VACUUM failed; trying again after the next run that deletes rows",
				"error", err, "duration", took)
		}
	case !allowed:
		if j.vacuumDenied.CompareAndSwap(false, true) {
			j.log.Warn("retention janitor cannot VACUUM the table: the role does not own it; relying on autovacuum")
		}
		return 0
	default:
		res.Vacuumed = true
	}
	return took
}

// describe says what the service keeps, for the start log line.
func (j *retention) describe() string {
	if j.cfg.KeepSent {
		return "keep sent rows"
	}
	return j.cfg.Retention.String()
}

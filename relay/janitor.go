package relay

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/migrations"
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
	// within partitionLockTimeout: the run stopped there, is not
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

// RunRetention runs the retention job once, if it is due (next_run_at has
// passed) and no other run holds it, which it decides in one statement on
// the database clock. The run deletes sent rows whose sent_at is older
// than Retention, at most JanitorBatch rows per statement, oldest first,
// renewing its lease on the job with each batch, until a batch finds fewer
// than JanitorBatch rows, the lease is lost, or ctx ends. A batch under way
// when ctx ends is finished (bounded by Lease); then the job is released.
// Failed, pending and processing rows are never deleted. With KeepSent it
// does nothing.
//
// A complete run that deleted rows then releases the job and runs VACUUM
// (SKIP_LOCKED, ANALYZE) on the table, cancelled when ctx ends, so that
// the space of the deleted rows is reused and the planner's statistics
// stay fresh where autovacuum lags or is off. That takes a role that owns
// the table or the database, or a superuser (from PostgreSQL 17, MAINTAIN
// on the table will do). PostgreSQL would skip the table for any other
// role with a mere warning, so the janitor checks first, logs once per
// Relay that it relies on autovacuum, and does not try again. A failed
// VACUUM is logged and reported in VacuumErr, not returned. NoVacuum
// turns the VACUUM off.
//
// Run calls it every JanitorInterval on every replica; call it yourself to
// run retention from elsewhere (KeepSent on the relays then keeps them out
// of it). See docs/architecture.md#retention.
func (r *Relay) RunRetention(ctx context.Context) (RetentionResult, error) {
	var res RetentionResult
	if r.cfg.KeepSent || ctx.Err() != nil {
		return res, nil
	}
	owner := r.token()
	// Detached like the row claim, within the shutdown bound: a claim
	// whose answer was lost to a cancellation would hold the job until its
	// lease ends.
	hard, stopHard := r.shutdownBound(ctx)
	defer stopHard()
	cctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	ok, err := r.store.claimJob(cctx, jobRetention, owner)
	cancel()
	if err != nil || !ok {
		return res, err
	}
	res.Ran = true
	start := time.Now()
	targets, err := r.dropPartitions(ctx, hard, owner, &res)
	if err != nil {
		r.finishRetention(hard, owner, &res)
		return res, err
	}
	done := 0 // targets with no expired row left
targets:
	for _, target := range targets {
		for !res.LeaseLost && ctx.Err() == nil {
			bctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
			n, held, err := r.store.deleteSent(bctx, owner, target, r.cfg.Retention, r.cfg.JanitorBatch)
			cancel()
			if err != nil {
				r.finishRetention(hard, owner, &res)
				return res, err
			}
			if !held {
				res.LeaseLost = true
				break targets
			}
			res.Batches++
			res.Deleted += n
			if n < int64(r.cfg.JanitorBatch) {
				done++
				break
			}
		}
	}
	res.Complete = done == len(targets) && !res.LeaseLost && !res.LockWaited && ctx.Err() == nil
	if !res.LeaseLost {
		r.finishRetention(hard, owner, &res)
	}
	took := time.Since(start)
	r.observe(Event{Kind: EventJanitorRan, Rows: int(res.Deleted), Duration: took})
	var vacuumTook time.Duration
	if res.Complete && res.Deleted > 0 {
		vacuumTook = r.vacuum(ctx, &res)
	}
	level := slog.LevelInfo
	if res.Deleted == 0 {
		level = slog.LevelDebug
	}
	r.log.Log(ctx, level, "retention run", "deleted", res.Deleted, "batches", res.Batches, "dropped_partitions", res.Dropped, "duration", took,
		"complete", res.Complete, "vacuumed", res.Vacuumed, "vacuum_duration", vacuumTook, "retention", r.cfg.Retention, "token", owner)

	if res.LeaseLost {
		r.log.Warn("retention job lost to another run; stopped", "token", owner, "deleted", res.Deleted)
	}
	return res, nil
}

// dropPartitions drops, on a partitioned table, the partitions whose
// events were all made more than Retention ago, oldest first, each in a
// transaction of its own fenced by the job, unless some of their rows are
// not sent or were sent within Retention (migrations.DropPartition); those
// are kept (res.Kept). It returns where the row deletes that follow look
// for expired sent rows: the partitions kept and the DEFAULT partition,
// never a partition that is not expired yet (it is dropped whole later);
// on an unpartitioned table, the table. A partition whose lock was not
// free in time (res.LockWaited) ends the drops of this run.
func (r *Relay) dropPartitions(ctx, hard context.Context, owner string, res *RetentionResult) (targets []string, err error) {
	if r.pg == nil {
		return []string{""}, nil // MySQL: the table, which is never partitioned
	}
	lctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	partitioned, now, err := r.pg.partitioned(lctx)
	if err != nil || !partitioned {
		return []string{r.pg.table.Ident()}, err
	}
	parts, err := migrations.Partitions(lctx, r.pg.pool, r.pg.table)
	if err != nil {
		return nil, err
	}
	if name, ok, err := migrations.DefaultPartition(lctx, r.pg.pool, r.pg.table); err != nil {
		return nil, err
	} else if ok {
		targets = append(targets, pgx.Identifier{r.pg.table.WithDefaults().Schema, name}.Sanitize())
	}
	cutoff := now.Add(-r.cfg.Retention)
	for _, p := range parts {
		if p.To.After(cutoff) || ctx.Err() != nil {
			break
		}
		var dropped bool
		var rows int64
		dctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
		held, waited, err := r.pg.inJob(dctx, jobRetention, owner, func(tx pgx.Tx) (int64, error) {
			var err error
			dropped, rows, err = migrations.DropPartition(dctx, tx, r.pg.table, p, cutoff)
			return rows, err
		})
		cancel()
		switch {
		case err != nil:
			return targets, fmt.Errorf("drop partition %s: %w", p.Name, err)
		case !held:
			res.LeaseLost = true
			return targets, nil
		case waited:
			res.LockWaited = true
			r.log.Info("retention janitor: the lock to drop a partition was not free in time; trying again at the next run",
				"partition", p.Name, "lock_timeout", partitionLockTimeout)
			return targets, nil
		case dropped:
			res.Dropped++
			res.DroppedRows += rows
			r.log.Info("retention janitor: dropped a partition", "partition", p.Name, "rows_estimate", rows, "token", owner)
		default:
			res.Kept++
			r.log.Debug("retention janitor: kept an expired partition that holds unfinished or recently sent rows", "partition", p.Name)
			targets = append(targets, pgx.Identifier{r.pg.table.WithDefaults().Schema, p.Name}.Sanitize())
		}
	}
	return targets, nil
}

// PartitionsResult says what one call of RunPartitions did.
type PartitionsResult struct {
	// Ran is true when the call held the partitions job: the table is
	// partitioned, the job was due and no other run held it.
	Ran bool
	// Created names the partitions the run created.
	Created []string
	// Waited is true when a lock was not available within
	// partitionLockTimeout: nothing was created, and the next run tries
	// again.
	Waited bool
	// LeaseLost is true when another run held the job by the time this
	// one wrote to it; what it created was rolled back.
	LeaseLost bool
}

// RunPartitions runs the partitions job of a partitioned table once, if it
// is due and no other run holds it: it creates the partitions missing from
// the current interval up to PartitionsAhead intervals, and at least three
// JanitorIntervals, ahead (migrations.CreatePartitions), in one
// transaction fenced by the job. On an unpartitioned table, which has no
// such job, it does nothing. Run calls it every JanitorInterval on every
// replica, whatever KeepSent says. Events whose partition does not exist
// yet are not lost: they go to the DEFAULT partition
// (docs/architecture.md#partitioned-tables).
func (r *Relay) RunPartitions(ctx context.Context) (PartitionsResult, error) {
	var res PartitionsResult
	if ctx.Err() != nil || r.pg == nil {
		return res, nil
	}
	owner := r.token()
	hard, stopHard := r.shutdownBound(ctx)
	defer stopHard()
	cctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	ok, err := r.store.claimJob(cctx, jobPartitions, owner)
	if err != nil || !ok {
		return res, err
	}
	res.Ran = true
	held, waited, err := r.pg.inJob(cctx, jobPartitions, owner, func(tx pgx.Tx) (int64, error) {
		created, err := migrations.CreatePartitions(cctx, tx, r.pg.table, 0, 3*r.cfg.JanitorInterval)
		for _, p := range created {
			res.Created = append(res.Created, p.Name)
		}
		return 0, err
	})
	res.LeaseLost, res.Waited = err == nil && !held, waited
	if !held || waited || err != nil {
		res.Created = nil
	}
	complete := err == nil && held && !waited
	if !res.LeaseLost {
		fctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
		_, ferr := r.store.finishJob(fctx, jobPartitions, owner, complete, r.cfg.JanitorInterval)
		cancel()
		if ferr != nil {
			r.log.Warn("releasing the partitions job failed; it returns when its lease ends", "token", owner, "error", ferr)
		}
	}
	if err != nil {
		return res, fmt.Errorf("create partitions: %w", err)
	}
	if len(res.Created) > 0 {
		r.log.Info("partitions job: created partitions", "created", res.Created, "token", owner)
	}
	if waited {
		r.log.Info("partitions job: a lock was not free in time; trying again at the next run", "lock_timeout", partitionLockTimeout)
	}
	return res, nil
}

// finishRetention releases the job held by owner; a complete run schedules
// the next one. It runs under hard (the run's shutdown bound), for at most
// one lease. A failure is only logged: the lease ends on its own.
func (r *Relay) finishRetention(hard context.Context, owner string, res *RetentionResult) {
	fctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	held, err := r.store.finishJob(fctx, jobRetention, owner, res.Complete, r.cfg.JanitorInterval)
	switch {
	case err != nil:
		r.log.Warn("releasing the retention job failed; it returns when its lease ends", "token", owner, "error", err)
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
func (r *Relay) vacuum(ctx context.Context, res *RetentionResult) time.Duration {
	if r.cfg.NoVacuum || r.vacuumDenied.Load() || ctx.Err() != nil || r.pg == nil {
		return 0
	}
	vctx, cancel := context.WithTimeout(ctx, vacuumTimeout)
	defer cancel()
	start := time.Now()
	allowed, err := r.pg.vacuum(vctx)
	took := time.Since(start)
	switch {
	case err != nil:
		res.VacuumErr = err
		if ctx.Err() == nil { // a shutdown is no failure worth a warning
			r.log.Warn("retention janitor: VACUUM failed; trying again after the next run that deletes rows",
				"error", err, "duration", took)
		}
	case !allowed:
		if r.vacuumDenied.CompareAndSwap(false, true) {
			r.log.Warn("retention janitor cannot VACUUM the table: the role does not own it; relying on autovacuum")
		}
		return 0
	default:
		res.Vacuumed = true
	}
	return took
}

// runJanitor calls RunRetention at once and then every JanitorInterval,
// plus up to a tenth of it at random so that replicas spread their looks,
// until ctx ends. Errors are logged and retried at the next look; they
// never stop the relay.
func (r *Relay) runJanitor(ctx context.Context) {
	for ctx.Err() == nil {
		if _, err := r.RunPartitions(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("partitions job: database error; trying again at the next interval", "error", err, "retry_in", r.cfg.JanitorInterval)
		}
		if res, err := r.RunRetention(ctx); err != nil && ctx.Err() == nil {
			level := slog.LevelWarn
			if r.store.fatal(err) {
				// Say it louder: the relay's role may lack DELETE on the
				// table, or the schema be older than the relay.
				level = slog.LevelError
			}
			r.log.Log(ctx, level, "retention janitor: database error; trying again at the next interval",
				"error", err, "deleted", res.Deleted, "retry_in", r.cfg.JanitorInterval)
		}
		sleep(ctx, r.cfg.JanitorInterval+rand.N(r.cfg.JanitorInterval/10+1))
	}
}

// retention describes the retention setting for the start log line.
func (r *Relay) retention() string {
	if r.cfg.KeepSent {
		return "keep sent rows"
	}
	return r.cfg.Retention.String()
}

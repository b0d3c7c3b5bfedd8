package relay

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
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
	// Vacuumed is true when a VACUUM (SKIP_LOCKED, ANALYZE) of the table
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
	for ctx.Err() == nil {
		bctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
		n, held, err := r.store.deleteSent(bctx, owner, r.cfg.Retention, r.cfg.JanitorBatch)
		cancel()
		if err != nil {
			r.finishRetention(hard, owner, &res)
			return res, err
		}
		if !held {
			res.LeaseLost = true
			break
		}
		res.Batches++
		res.Deleted += n
		if n < int64(r.cfg.JanitorBatch) {
			res.Complete = true
			break
		}
	}
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
	r.log.Log(ctx, level, "retention run", "deleted", res.Deleted, "batches", res.Batches, "duration", took,
		"complete", res.Complete, "vacuumed", res.Vacuumed, "vacuum_duration", vacuumTook, "retention", r.cfg.Retention, "token", owner)
	if res.LeaseLost {
		r.log.Warn("retention job lost to another run; stopped", "token", owner, "deleted", res.Deleted)
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

// vacuum runs VACUUM (SKIP_LOCKED, ANALYZE) on the table after a run that
// deleted rows, unless NoVacuum is set, ctx has ended or the role was found
// unable to vacuum the table. The job is released by then: the VACUUM
// holds nothing another run needs. It records the outcome in res and
// returns how long the VACUUM took. A failure is logged, never returned
// nor fatal.
func (r *Relay) vacuum(ctx context.Context, res *RetentionResult) time.Duration {
	if r.cfg.NoVacuum || r.vacuumDenied.Load() || ctx.Err() != nil {
		return 0
	}
	vctx, cancel := context.WithTimeout(ctx, vacuumTimeout)
	defer cancel()
	start := time.Now()
	allowed, err := r.store.vacuum(vctx)
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
		if res, err := r.RunRetention(ctx); err != nil && ctx.Err() == nil {
			level := slog.LevelWarn
			if fatal(err) {
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

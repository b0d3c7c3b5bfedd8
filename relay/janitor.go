package relay

import "context"

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
	return r.retention.run(ctx)
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
	return r.partitions.run(ctx)
}

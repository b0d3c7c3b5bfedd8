package relay

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// PartitionsResult says what one call of RunPartitions did.
type PartitionsResult struct {
	// Ran is true when the call held the partitions job: the table is
	// partitioned, the job was due and no other run held it.
	Ran bool
	// Created names the partitions the run created.
	Created []string
	// Waited is true when a lock was not available within
	// 250ms: nothing was created, and the next run tries
	// again.
	Waited bool
	// LeaseLost is true when another run held the job by the time this
	// one wrote to it; what it created was rolled back.
	LeaseLost bool
}

// partitionManager is the partitions service of a partitioned table: it
// creates the partitions ahead of the clock in runs that hold the
// partitions job (RunPartitions), every JanitorInterval.
type partitionManager struct {
	cfg    Config
	parts  store.Partitions // nil where the table is never partitioned (MySQL): the service does nothing
	store  store.Store
	log    *slog.Logger
	tokens *tokens
}

// loop runs the service at once and then every JanitorInterval until ctx
// ends. Errors are logged and retried at the next run.
func (j *partitionManager) loop(ctx context.Context) {
	every(ctx, j.cfg.JanitorInterval, func() {
		if _, err := j.run(ctx); err != nil && ctx.Err() == nil {
			j.log.Warn("partitions job: database error; trying again at the next interval", "error", err, "retry_in", j.cfg.JanitorInterval)
		}
	})
}

// run is RunPartitions.
func (j *partitionManager) run(ctx context.Context) (PartitionsResult, error) {
	var res PartitionsResult
	if ctx.Err() != nil || j.parts == nil {
		return res, nil
	}
	owner := j.tokens.next()
	hard, stopHard := shutdownBound(ctx, j.cfg)
	defer stopHard()
	cctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
	defer cancel()
	ok, err := j.store.ClaimJob(cctx, store.JobPartitions, owner)
	if err != nil || !ok {
		return res, err
	}
	res.Ran = true
	created, step, err := j.parts.CreatePartitions(cctx, store.JobPartitions, owner, 3*j.cfg.JanitorInterval)
	res.Created = created
	res.LeaseLost, res.Waited = err == nil && !step.Held, step.Waited
	complete := err == nil && step.Held && !step.Waited
	if !res.LeaseLost {
		fctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
		_, ferr := j.store.FinishJob(fctx, store.JobPartitions, owner, complete, j.cfg.JanitorInterval)
		cancel()
		if ferr != nil {
			j.log.Warn("releasing the partitions job failed; it returns when its lease ends", "token", owner, "error", ferr)
		}
	}
	if err != nil {
		return res, fmt.Errorf("create partitions: %w", err)
	}
	if len(res.Created) > 0 {
		j.log.Info("partitions job: created partitions", "created", res.Created, "token", owner)
	}
	if step.Waited {
		j.log.Info("partitions job: a lock was not free in time; trying again at the next run", "lock_timeout", store.PartitionLockTimeout)
	}
	return res, nil
}

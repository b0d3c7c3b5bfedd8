package relay

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/migrations"
)

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

// partitionManager is the partitions service of a partitioned table: it
// creates the partitions ahead of the clock in runs that hold the
// partitions job (RunPartitions), every JanitorInterval.
type partitionManager struct {
	cfg    Config
	pg     *pgStore // nil on MySQL: the service does nothing
	store  Store
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
	if ctx.Err() != nil || j.pg == nil {
		return res, nil
	}
	owner := j.tokens.next()
	hard, stopHard := shutdownBound(ctx, j.cfg)
	defer stopHard()
	cctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
	defer cancel()
	ok, err := j.store.ClaimJob(cctx, jobPartitions, owner)
	if err != nil || !ok {
		return res, err
	}
	res.Ran = true
	held, waited, err := j.pg.inJob(cctx, jobPartitions, owner, func(tx pgx.Tx) (int64, error) {
		created, err := migrations.CreatePartitions(cctx, tx, j.pg.table, 0, 3*j.cfg.JanitorInterval)
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
		fctx, cancel := context.WithTimeout(hard, j.cfg.Lease)
		_, ferr := j.store.FinishJob(fctx, jobPartitions, owner, complete, j.cfg.JanitorInterval)
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
	if waited {
		j.log.Info("partitions job: a lock was not free in time; trying again at the next run", "lock_timeout", partitionLockTimeout)
	}
	return res, nil
}

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// xactsSQL reads the transactions the database has counted.
const xactsSQL = `SELECT xact_commit + xact_rollback
FROM pg_stat_database
WHERE datname = current_database()`

// idle runs the relays on an empty table for cfg.Duration and reports
// the database work they cause.
func (r *runner) idle(ctx context.Context) error {
	if err := vacuumAnalyze(ctx, r.pool, r.table); err != nil {
		return err
	}
	if err := r.recordBefore(ctx); err != nil {
		return err
	}
	before, err := r.quietXacts(ctx)
	if err != nil {
		return err
	}
	if err := r.startRelays(); err != nil {
		return err
	}
	defer r.abort()
	if err := r.procs.awaitReady(ctx); err != nil {
		return err
	}
	fmt.Fprintf(r.cfg.Progress, "idle: %d relays: watching for %v\n", r.relays, r.cfg.Duration)
	r.startSampler(ctx)
	start := time.Now()
	wait(ctx, r.cfg.Duration)
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := r.procs.exited(); err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	smp := r.sampler.finish()
	if err := r.stopRelays(ctx); err != nil {
		return err
	}
	after, err := r.quietXacts(ctx)
	if err != nil {
		return err
	}
	r.res.Seconds = elapsed
	r.res.Idle = &IdleStats{DBXactPerSecond: float64(after-before-int64(smp.queries)) / elapsed}
	if smp.enabled {
		claims, statements := float64(len(smp.claimMS))/elapsed, float64(smp.statements)/elapsed
		r.res.Idle.ClaimsPerSecond, r.res.Idle.StatementsPerSecond = &claims, &statements
	}
	return r.recordAfter(ctx)
}

// quietXacts closes the harness's idle connections, so that their backends
// report what they did, and then reads the database's transaction count.
func (r *runner) quietXacts(ctx context.Context) (int64, error) {
	r.pool.Reset()
	var n int64
	err := r.pool.AcquireFunc(ctx, func(conn *pgxpool.Conn) error {
		if err := freshStatistics(ctx, conn); err != nil {
			return err
		}
		return conn.QueryRow(ctx, xactsSQL).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("transaction count: %w", err)
	}
	return n, nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// The statements of a soak sample. {{table}} and {{jobs}} are replaced by
// quoted identifiers.
const (
	// soakTableSQL reads the sizes and the statistics of the table: of
	// its partitions, summed, when it is partitioned (pg_partition_tree
	// lists nothing for an unpartitioned table, which is then its own
	// only leaf). The total is the
	// sum of the two sizes, which is what pg_total_relation_size
	// computes: calling it as well would read the files at another
	// instant, and a concurrent insert could make the three disagree.
	soakTableSQL = `SELECT coalesce(sum(pg_table_size(t.relid)), 0)::bigint,
       coalesce(sum(pg_indexes_size(t.relid)), 0)::bigint,
       coalesce(sum(s.n_live_tup), 0)::bigint,
       coalesce(sum(s.n_dead_tup), 0)::bigint,
       coalesce(sum(s.autovacuum_count), 0)::bigint,
       coalesce(sum(s.vacuum_count), 0)::bigint,
       count(*) FILTER (WHERE t.level > 0)
FROM (
    SELECT relid, level FROM pg_partition_tree(to_regclass($1)) WHERE isleaf
    UNION ALL
    SELECT to_regclass($1), 0
    WHERE NOT EXISTS (SELECT FROM pg_partition_tree(to_regclass($1)))
) AS t
LEFT JOIN pg_stat_user_tables AS s ON s.relid = t.relid`

	// soakCountsSQL counts the rows of the statuses that have a partial
	// index. It runs with sequential and bitmap scans off (soakCountsSetup),
	// so that each count is an index-only scan of its index rather than a
	// scan of the table.
	soakCountsSQL = `SELECT (SELECT count(*) FROM {{table}} WHERE status = 'pending'),
       (SELECT count(*) FROM {{table}} WHERE status = 'processing'),
       (SELECT count(*) FROM {{table}} WHERE status = 'sent')`

	// soakJobSQL reads the retention job's row.
	soakJobSQL = `SELECT total_deleted, last_deleted, locked_by, locked_until, last_finished_at
FROM {{jobs}}
WHERE job = 'retention'`

	// oldestXactSQL is the age of the oldest transaction holding a snapshot
	// or a transaction id in the database, other than the reading one's
	// (activitySQL uses it too). Idle sessions are left out: they hold no
	// transaction, but one that LISTENs takes a snapshot for a moment each
	// time it reads notifications, while pg_stat_activity still shows the
	// xact_start of its last real transaction, as old as the session. That
	// read as a transaction open for the whole run in every steady run.
	oldestXactSQL = `SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0)::float8
FROM pg_stat_activity
WHERE datname = current_database()
  AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
  AND state <> 'idle'
  AND pid <> pg_backend_pid()`
)

// soakCountsSetup bounds soakCountsSQL and keeps it on the partial indexes.
var soakCountsSetup = []string{
	"SET LOCAL statement_timeout = '1s'",
	"SET LOCAL enable_seqscan = off",
	"SET LOCAL enable_bitmapscan = off",
}

// soak is steady mode with the relays' retention janitor on, for a long
// time, sampled every cfg.SampleEvery: see SoakStats.
func (r *runner) soak(ctx context.Context) error {
	a, stopConsumer, err := r.startFollowing(ctx)
	if err != nil {
		return err
	}
	defer stopConsumer() //nolint:errcheck // error paths; finishFollowing checks it
	defer r.abort()
	var autovacuum bool
	if err := r.pool.QueryRow(ctx, "SELECT current_setting('autovacuum')::bool").Scan(&autovacuum); err != nil {
		return fmt.Errorf("read the autovacuum setting: %w", err)
	}
	if !autovacuum {
		fmt.Fprintf(r.cfg.Progress, "soak: warning: autovacuum is off on this server; only the harness's --vacuum-every (%v; 0 is never) vacuums the table\n", r.cfg.VacuumEvery)
	}
	release, err := r.holdSnapshot(ctx)
	if err != nil {
		return err
	}
	defer release()
	events := r.procs.events()
	r.startSampler(ctx)
	fmt.Fprintf(r.cfg.Progress, "soak: %d relays: writing %d events/s for %v, retention %v, janitor every %v, a sample every %v\n",
		r.relays, r.cfg.Rate, r.cfg.Duration, r.cfg.Retention, r.cfg.JanitorInterval, r.cfg.SampleEvery)
	writes, elapsed, edges, samples, vacuumMS, err := r.writeAndSample(ctx)
	if err != nil {
		return err
	}
	if err := r.finishFollowing(ctx, a, writes, elapsed, stopConsumer); err != nil {
		return err
	}
	fillWindows(samples, edges, events, writes, a)
	if r.sampler != nil {
		oldestInWindows(samples, edges, r.sampler.finish().oldestAt)
	}
	r.res.Soak = &SoakStats{
		SampleEveryS: r.cfg.SampleEvery.Seconds(), RetentionS: r.cfg.Retention.Seconds(),
		JanitorIntervalS: r.cfg.JanitorInterval.Seconds(), Autovacuum: autovacuum,
		VacuumEveryS: r.cfg.VacuumEvery.Seconds(), Vacuum: percentilesOf(vacuumMS), Samples: samples,
	}
	r.res.Soak.judge(r.cfg.Duration)
	return r.recordSentAndAfter(ctx)
}

// writeAndSample writes like steady mode and samples the table when the
// writers start, every cfg.SampleEvery after, and once they have stopped;
// with cfg.VacuumEvery it vacuums the table meanwhile (see vacuumLoop),
// until the writers stop. edges are the samples' times (on the wall clock,
// for comparing with the times of the relays' events); vacuumMS the
// durations of the vacuums.
func (r *runner) writeAndSample(ctx context.Context) (writes []write, elapsed time.Duration, edges []time.Time, samples []SoakSample, vacuumMS []float64, err error) {
	type written struct {
		writes  []write
		elapsed time.Duration
		err     error
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan written, 1)
	start := time.Now()
	go func() {
		w, e, err := writeSteadyFrom(wctx, r.pool, r.table, r.topic, r.cfg, start)
		done <- written{w, e, err}
	}()
	stopVacuums := func() []float64 { return nil }
	if r.cfg.VacuumEvery > 0 {
		stopVacuums = vacuumLoop(wctx, r.pool, r.table, start, r.cfg.VacuumEvery, r.cfg.Progress)
	}
	// On an error, stop the writers and the vacuums and wait for them: no
	// goroutine of the run outlives it.
	fail := func(err error) ([]write, time.Duration, []time.Time, []SoakSample, []float64, error) {
		cancel()
		<-done
		stopVacuums()
		return nil, 0, nil, nil, nil, err
	}
	take := func(at time.Time) error {
		s, err := readSoakSample(ctx, r.pool, r.table)
		if err != nil {
			return err
		}
		s.ElapsedS = at.Sub(start).Seconds()
		edges, samples = append(edges, at.Round(0)), append(samples, s)
		r.progressSample(s)
		return nil
	}
	// The first sample's time is the writers' start, so that every commit
	// falls in a window.
	if err := take(start); err != nil {
		return fail(err)
	}
	end := start.Add(r.cfg.Duration)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var w written
	finished := false
ticks:
	for k := 1; ; k++ {
		next := start.Add(time.Duration(k) * r.cfg.SampleEvery)
		if !next.Before(end) {
			break // the last sample is taken once the writers stopped
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case w = <-done:
			finished = true // before the next tick: failed, or done just before the end
			break ticks
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		if err := r.procs.exited(); err != nil {
			return fail(err)
		}
		if err := take(time.Now()); err != nil {
			return fail(err)
		}
	}
	if !finished {
		select {
		case w = <-done:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	vacuumMS = stopVacuums()
	if w.err != nil {
		return nil, 0, nil, nil, nil, w.err
	}
	if err := r.procs.exited(); err != nil {
		return nil, 0, nil, nil, nil, err
	}
	if err := take(time.Now()); err != nil {
		return nil, 0, nil, nil, nil, err
	}
	return w.writes, w.elapsed, edges, samples, vacuumMS, nil
}

// vacuumSetup throttles the harness's VACUUM like autovacuum's defaults
// (autovacuum_vacuum_cost_delay 2ms; autovacuum_vacuum_cost_limit -1, that
// is vacuum_cost_limit, 200), where a VACUUM by hand runs unthrottled.
var vacuumSetup = []string{"SET vacuum_cost_delay = '2ms'", "SET vacuum_cost_limit = 200"}

// vacuumLoop runs VACUUM (ANALYZE) on the table at start + k*every (k >= 1)
// until the returned stop is called, which ends a VACUUM under way, waits
// for the loop and returns the durations of the vacuums that finished, in
// ms. A vacuum that overran its slot skips the slots it covered, as
// autovacuum does not start a second worker on a table. Failures are
// reported on progress and the loop goes on.
func vacuumLoop(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, start time.Time, every time.Duration, progress io.Writer) (stop func() []float64) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var took []float64
	go func() {
		defer close(done)
		timer := time.NewTimer(0)
		defer timer.Stop()
		<-timer.C
		for k := 1; ; k++ {
			next := start.Add(time.Duration(k) * every)
			if time.Until(next) < 0 {
				continue // overran
			}
			timer.Reset(time.Until(next))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			began := time.Now()
			err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
				for _, q := range vacuumSetup {
					if _, err := c.Exec(ctx, q); err != nil {
						return err
					}
				}
				_, err := c.Exec(ctx, "VACUUM (ANALYZE) "+table.Ident())
				return err
			})
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				fmt.Fprintf(progress, "soak: warning: vacuum %s: %v\n", table, err)
			default:
				took = append(took, ms(time.Since(began)))
			}
		}
	}()
	return sync.OnceValue(func() []float64 {
		cancel()
		<-done
		return took
	})
}

// progressSample prints one line per sample while the soak runs.
func (r *runner) progressSample(s SoakSample) {
	deleted := "-"
	if s.Janitor != nil {
		deleted = fmt.Sprint(s.Janitor.TotalDeleted)
	}
	fmt.Fprintf(r.cfg.Progress, "soak: %d relays: %5.0fs: size %.1f MB (table %.1f, indexes %.1f), %d live / %d dead tuples, %d autovacuums, pending %s, sent %s, janitor deleted %s, oldest xact %.1fs\n",
		r.relays, s.ElapsedS, mb(s.SizeBytes), mb(s.TableBytes), mb(s.IndexesBytes), s.LiveTuples, s.DeadTuples, s.Autovacuums,
		optionalInt(s.Pending), optionalInt(s.Sent), deleted, s.OldestXactS)
}

// readSoakSample reads the table's sizes and statistics, its rows by
// status, the retention job's row and the oldest transaction, on one
// connection. The window fields are left empty (see fillWindows).
func readSoakSample(ctx context.Context, pool *pgxpool.Pool, table outbox.Table) (SoakSample, error) {
	var s SoakSample
	err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		if err := freshStatistics(ctx, c); err != nil {
			return err
		}
		if err := c.QueryRow(ctx, soakTableSQL, table.Ident()).Scan(
			&s.TableBytes, &s.IndexesBytes, &s.LiveTuples, &s.DeadTuples, &s.Autovacuums, &s.Vacuums, &s.Partitions); err != nil {
			return err
		}
		s.SizeBytes = s.TableBytes + s.IndexesBytes
		var err error
		if s.Pending, s.Processing, s.Sent, err = countByStatus(ctx, c, table); err != nil {
			return err
		}
		if s.Janitor, err = readJanitorJob(ctx, c, table); err != nil {
			return err
		}
		return c.QueryRow(ctx, oldestXactSQL).Scan(&s.OldestXactS)
	})
	if err != nil {
		return s, fmt.Errorf("sample %s: %w", table, err)
	}
	return s, nil
}

// countByStatus counts the pending, processing and sent rows on their
// partial indexes; all three are nil when the statement ran out of its
// time.
func countByStatus(ctx context.Context, c *pgxpool.Conn, table outbox.Table) (pending, processing, sent *int64, err error) {
	err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		for _, q := range soakCountsSetup {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		var p, pr, s int64
		if err := tx.QueryRow(ctx, sqlFor(soakCountsSQL, table)).Scan(&p, &pr, &s); err != nil {
			return err
		}
		pending, processing, sent = &p, &pr, &s
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" { // query_canceled: the statement_timeout
		return nil, nil, nil, nil
	}
	return pending, processing, sent, err
}

// readJanitorJob reads the retention job's row; nil when there is none.
func readJanitorJob(ctx context.Context, c *pgxpool.Conn, table outbox.Table) (*JanitorJob, error) {
	var j JanitorJob
	err := c.QueryRow(ctx, sqlFor(soakJobSQL, table)).Scan(&j.TotalDeleted, &j.LastDeleted, &j.LockedBy, &j.LockedUntil, &j.LastFinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &j, nil
}

// fillWindows fills the window fields of samples: sample i (i >= 1) covers
// the time after edges[i-1] up to edges[i]. Claims and janitor runs come
// from the relays' observer events reported in the window, latencies from
// the outbox events that arrived in it.
func fillWindows(samples []SoakSample, edges []time.Time, events []*relayEvents, writes []write, a *arrivals) {
	w := newEventWindows(edges)
	for _, ev := range events {
		w.collect(ev)
	}
	latency := make([][]float64, len(edges))
	for _, x := range writes {
		if i := windowIndex(edges, x.committed); i > 0 {
			samples[i].Written++
		}
		at, ok := a.at(x.id)
		if !ok {
			continue
		}
		if i := windowIndex(edges, at); i > 0 {
			samples[i].Received++
			latency[i] = append(latency[i], ms(at.Sub(x.committed)))
		}
	}
	for i := 1; i < len(samples); i++ {
		samples[i].Claim = percentilesOf(w.claimMS[i])
		samples[i].Latency = percentilesOf(latency[i])
		samples[i].JanitorRuns, samples[i].JanitorDeleted = w.retentionRuns[i], w.retentionDeleted[i]
	}
}

// oldestInWindows raises each sample's OldestXactS to the largest reading
// of the pg_stat_activity sampler in its window.
func oldestInWindows(samples []SoakSample, edges []time.Time, readings []oldestReading) {
	for _, o := range readings {
		if i := windowIndex(edges, o.at); i > 0 {
			samples[i].OldestXactS = max(samples[i].OldestXactS, o.seconds)
		}
	}
}

// judge computes the verdicts of s from s.Samples and the soak's duration
// (see SoakStats for the rules).
func (s *SoakStats) judge(duration time.Duration) {
	n := len(s.Samples)
	if n == 0 {
		return
	}
	d := duration.Seconds()
	at := func(f float64) int { return nearestSample(s.Samples, f*d) }
	last := s.Samples[n-1]
	half, third, lastThird := at(0.5), at(1.0/3), at(2.0/3)
	s.HalfS = s.Samples[half].ElapsedS
	s.SizeGrowthSecondHalf = ratio(float64(last.SizeBytes), float64(s.Samples[half].SizeBytes))
	s.DeadTuplesHalf, s.DeadTuplesLast = s.Samples[half].DeadTuples, last.DeadTuples
	s.DeadTuplesSlopePerMin = deadTupleSlope(s.Samples[half:])
	s.ThirdS, s.LastThirdS = s.Samples[third].ElapsedS, s.Samples[lastThird].ElapsedS
	for i := third + 1; i <= lastThird; i++ {
		s.DeadTuplesPeakMiddleThird = max(s.DeadTuplesPeakMiddleThird, s.Samples[i].DeadTuples)
	}
	for i := lastThird + 1; i < n; i++ {
		s.DeadTuplesPeakLastThird = max(s.DeadTuplesPeakLastThird, s.Samples[i].DeadTuples)
	}
	s.SizeLastThirdStart, s.SizeLast = s.Samples[lastThird].SizeBytes, last.SizeBytes
	s.SizeLeveled = float64(s.SizeLast) <= LevelTolerance*float64(s.SizeLastThirdStart)
	s.DeadTuplesLeveled = float64(s.DeadTuplesPeakLastThird) <= LevelTolerance*float64(s.DeadTuplesPeakMiddleThird)
	s.Leveled = n >= 4 && s.SizeLeveled && s.DeadTuplesLeveled

	s.WarmupS = s.RetentionS + s.JanitorIntervalS
	first, final := -1, -1
	for i := 1; i < n; i++ {
		if s.Samples[i].Claim == nil {
			continue
		}
		if first < 0 && s.Samples[i-1].ElapsedS >= s.WarmupS {
			first = i
		}
		final = i
	}
	if first < 0 || final < first {
		return
	}
	window := func(i int) []float64 { return []float64{s.Samples[i-1].ElapsedS, s.Samples[i].ElapsedS} }
	s.ClaimFirstWindowS, s.ClaimLastWindowS = window(first), window(final)
	a, b := s.Samples[first].Claim, s.Samples[final].Claim
	s.ClaimP50Ratio, s.ClaimP99Ratio = ratio(b.P50, a.P50), ratio(b.P99, a.P99)
	s.ClaimWithin2x = s.ClaimP50Ratio != nil && *s.ClaimP50Ratio <= ClaimTolerance
}

// nearestSample returns the index of the sample whose elapsed time is
// nearest to t (the earlier one on a tie).
func nearestSample(samples []SoakSample, t float64) int {
	best := 0
	for i, s := range samples {
		if math.Abs(s.ElapsedS-t) < math.Abs(samples[best].ElapsedS-t) {
			best = i
		}
	}
	return best
}

// deadTupleSlope is the least-squares slope of dead tuples over time, per
// minute; nil with fewer than two samples.
func deadTupleSlope(samples []SoakSample) *float64 {
	if len(samples) < 2 {
		return nil
	}
	var sx, sy float64
	for _, s := range samples {
		sx += s.ElapsedS
		sy += float64(s.DeadTuples)
	}
	n := float64(len(samples))
	mx, my := sx/n, sy/n
	var sxy, sxx float64
	for _, s := range samples {
		dx := s.ElapsedS - mx
		sxy += dx * (float64(s.DeadTuples) - my)
		sxx += dx * dx
	}
	if sxx == 0 {
		return nil
	}
	slope := sxy / sxx * 60
	return &slope
}

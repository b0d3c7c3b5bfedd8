package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// The SQL-only reference lifecycle, the SQL ceiling: the statements a
// lease relay must run, with no Go relay and no broker. They run on an
// outbox table made by package migrations, as the relay's is, so that the
// ceiling pays for the same columns, indexes and triggers. {{table}} is
// replaced by the quoted table name.
const (
	ceilingTruncateSQL = `TRUNCATE {{table}}`

	// ceilingFillSQL inserts $1 rows with a 16-byte key and a $2-byte
	// payload; their ids are the table's default (migration 006).
	ceilingFillSQL = `INSERT INTO {{table}} (topic, key, payload)
SELECT 'orders', decode(md5(g::text), 'hex'), convert_to(repeat('x', $2), 'UTF8')
FROM generate_series(1, $1) AS g`

	// ceilingClaimSQL takes up to $1 due rows for owner $2 under a lease.
	ceilingClaimSQL = `WITH picked AS (
    SELECT id
    FROM {{table}}
    WHERE status = 'pending'
      AND next_retry_at <= now()
    ORDER BY next_retry_at, id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS o
SET status = 'processing',
    locked_by = $2,
    locked_until = now() + interval '30 s',
    attempt = o.attempt + 1
FROM picked
WHERE o.id = picked.id`

	// ceilingMarkSentSQL records owner $1's rows as sent.
	ceilingMarkSentSQL = `UPDATE {{table}}
SET status = 'sent',
    sent_at = now(),
    locked_by = NULL,
    locked_until = NULL
WHERE status = 'processing'
  AND locked_by = $1`

	// ceilingDeleteSQL deletes owner $1's rows instead.
	ceilingDeleteSQL = `DELETE FROM {{table}}
WHERE status = 'processing'
  AND locked_by = $1`
)

// lifecycle is one variant of the reference: the claim, then this.
type lifecycle struct {
	name   string
	finish string
}

var lifecycles = []lifecycle{
	{LifecycleMarkSent, ceilingMarkSentSQL},
	{LifecycleDeleteSent, ceilingDeleteSQL},
}

// Lifecycle names, as in CeilingResult.Lifecycle.
const (
	LifecycleMarkSent   = "mark_sent"
	LifecycleDeleteSent = "delete_sent"
)

// ceilingIterations is the reference's loop count per client: three
// quarters of the rows, in batches, shared among the clients (integer
// arithmetic), so no client runs out of rows.
func ceilingIterations(rows, batch, clients int) int {
	return rows / batch / clients * 3 / 4
}

// runCeiling measures every lifecycle with every client count of cfg on
// an outbox table migrated in the schema cfg.Schema + "_ceiling", which it
// drops at the end.
//
// As pgbench would run them from a script, each client runs the claim
// and then the second statement, each in its own (autocommit) transaction
// and over the simple query protocol; one loop is one "transaction" of
// pgbench. Connections are made before the clock starts.
func runCeiling(ctx context.Context, cfg Config, pool *pgxpool.Pool) ([]CeilingResult, error) {
	table, drop, err := ceilingTable(ctx, cfg, pool)
	if err != nil {
		return nil, err
	}
	defer drop()
	var out []CeilingResult
	for _, clients := range cfg.CeilingClients {
		for _, lc := range lifecycles {
			if err := fillCeiling(ctx, pool, table, cfg.CeilingRows, cfg.PayloadBytes); err != nil {
				return out, err
			}
			res, err := measureCeiling(ctx, cfg, table, lc, clients)
			if err != nil {
				return out, err
			}
			fmt.Fprintf(cfg.Progress, "ceiling: %s clients=%d %.0f events/s\n", lc.name, clients, res.EventsPerSecond)
			out = append(out, res)
		}
	}
	return out, nil
}

// ceilingTable recreates the ceiling's schema, cfg.Schema + "_ceiling",
// and migrates an outbox table in it. drop drops the schema.
func ceilingTable(ctx context.Context, cfg Config, pool *pgxpool.Pool) (table outbox.Table, drop func(), err error) {
	schema := cfg.Schema + ceilingSuffix
	if err := resetSchema(ctx, pool, schema); err != nil {
		return table, nil, err
	}
	drop = func() {
		dropSchema(context.WithoutCancel(ctx), pool, schema) //nolint:errcheck // best effort
	}
	if table, err = migrateOutbox(ctx, pool, schema, true, migrations.Options{}); err != nil {
		drop()
		return table, nil, fmt.Errorf("ceiling: %w", err)
	}
	return table, drop, nil
}

// fillCeiling empties the table and fills it with rows pending rows.
func fillCeiling(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, rows, payload int) error {
	if _, err := pool.Exec(ctx, sqlFor(ceilingTruncateSQL, table)); err != nil {
		return fmt.Errorf("ceiling: truncate: %w", err)
	}
	if _, err := pool.Exec(ctx, sqlFor(ceilingFillSQL, table), rows, payload); err != nil {
		return fmt.Errorf("ceiling: fill: %w", err)
	}
	return vacuumAnalyze(ctx, pool, table)
}

// measureCeiling runs one lifecycle with clients connections.
func measureCeiling(ctx context.Context, cfg Config, table outbox.Table, lc lifecycle, clients int) (CeilingResult, error) {
	conns, err := ceilingConns(ctx, cfg.DatabaseURL, clients)
	if err != nil {
		return CeilingResult{}, err
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	n := ceilingIterations(cfg.CeilingRows, cfg.BatchSize, clients)
	claim, finish := sqlFor(ceilingClaimSQL, table), sqlFor(lc.finish, table)
	claimed := make([]int, clients)
	errs := make([]error, clients)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			claimed[i], errs[i] = ceilingLoop(ctx, c, claim, finish, cfg.BatchSize, fmt.Sprintf("w%d", i+1), n)
		}()
	}
	began, cpu := time.Now(), hostReading()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	res := CeilingResult{Lifecycle: lc.name, Clients: clients, Rows: cfg.CeilingRows, Batch: cfg.BatchSize, Seconds: elapsed.Seconds(),
		HostCPUBusy: hostBusyBetween(cpu, hostReading())}
	for i := range conns {
		if errs[i] != nil {
			return res, fmt.Errorf("ceiling %s: %w", lc.name, errs[i])
		}
		res.Events += claimed[i]
	}
	res.EventsPerSecond = float64(res.Events) / elapsed.Seconds()
	return res, nil
}

// ceilingConns opens n connections speaking the simple query protocol,
// as pgbench does by default.
func ceilingConns(ctx context.Context, url string, n int) ([]*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	var conns []*pgx.Conn
	for range n {
		c, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			for _, c := range conns {
				_ = c.Close(ctx)
			}
			return nil, fmt.Errorf("ceiling: connect: %w", err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// ceilingLoop runs n iterations of claim + finish and returns the rows
// claimed.
func ceilingLoop(ctx context.Context, c *pgx.Conn, claim, finish string, batch int, owner string, n int) (int, error) {
	total := 0
	for range n {
		tag, err := c.Exec(ctx, claim, batch, owner)
		if err != nil {
			return total, err
		}
		total += int(tag.RowsAffected())
		if _, err := c.Exec(ctx, finish, owner); err != nil {
			return total, err
		}
	}
	return total, nil
}

// mainCeiling returns the figure ratios are computed against: mark_sent
// at one client or, on MySQL, the faster of mark_sent and
// mark_sent_in_claim at one client (the relay runs one or the other by
// batch size); 0 when it was not measured.
func mainCeiling(results []CeilingResult) float64 {
	best := 0.0
	for _, r := range results {
		if (r.Lifecycle == LifecycleMarkSent || r.Lifecycle == LifecycleMarkSentInClaim) && r.Clients == 1 {
			best = max(best, r.EventsPerSecond)
		}
	}
	return best
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// ErrForeignSchema is returned when the schema to drop exists but was not
// created by Run: the benchmark drops only what it made.
var ErrForeignSchema = errors.New("bench: schema exists and was not created by relay-bench")

// schemaMarker is the comment Run puts on the schemas it creates; only a
// schema carrying it is dropped. The text stays as it is, so that the
// schemas earlier versions marked are still recognized.
const schemaMarker = "outboxrelay bench: dropped and recreated by every run of relay bench"

// The statements about the schema and the table's health. {{schema}} and
// {{table}} are replaced by quoted identifiers.
const (
	schemaCommentSQL = `SELECT coalesce(obj_description(oid, 'pg_namespace'), '')
FROM pg_namespace
WHERE nspname = $1`

	createSchemaSQL = `CREATE SCHEMA {{schema}}`

	markSchemaSQL = `COMMENT ON SCHEMA {{schema}} IS '` + schemaMarker + `'`

	dropSchemaSQL = `DROP SCHEMA IF EXISTS {{schema}} CASCADE`

	// tableStatsSQL reads the dead tuples, autovacuum runs and total size
	// (heap, TOAST and indexes) of a table.
	tableStatsSQL = `SELECT coalesce(s.n_dead_tup, 0),
       coalesce(s.autovacuum_count, 0),
       pg_total_relation_size(c.oid)
FROM pg_class AS c
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = to_regclass($1)`

	// backendsSQL lists the backends of the given application names.
	backendsSQL = `SELECT pid
FROM pg_stat_activity
WHERE application_name = ANY($1)`

	// unfinishedSQL tells whether a row is still pending or processing.
	// Each branch reads its partial index in its order and stops at the
	// first entry, like the claim; a count would read every remaining row
	// and take CPU from the relays.
	unfinishedSQL = `SELECT EXISTS (
    SELECT 1 FROM {{table}}
    WHERE status = 'pending'
    ORDER BY next_retry_at, id
    LIMIT 1
) OR EXISTS (
    SELECT 1 FROM {{table}}
    WHERE status = 'processing'
    ORDER BY locked_until
    LIMIT 1
)`

	statusCountsSQL = `SELECT status, count(*)
FROM {{table}}
GROUP BY status`

	lastSentSQL = `SELECT max(sent_at)
FROM {{table}}`
)

// sqlFor fills the {{schema}}, {{table}} and {{jobs}} (the jobs table of
// migration 004) placeholders with quoted names.
func sqlFor(query string, table outbox.Table) string {
	return strings.NewReplacer(
		"{{schema}}", pgx.Identifier{table.Schema}.Sanitize(),
		"{{table}}", table.Ident(),
		"{{jobs}}", table.Related("jobs"),
	).Replace(query)
}

// resetSchema drops schema if Run created it, and creates it afresh,
// marked as Run's.
func resetSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	t := outbox.Table{Schema: schema}
	var comment string
	err := pool.QueryRow(ctx, schemaCommentSQL, schema).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("look up schema %s: %w", schema, err)
	case comment != schemaMarker:
		return fmt.Errorf("%w: %s (drop it yourself or choose another schema)", ErrForeignSchema, schema)
	}
	for _, q := range []string{dropSchemaSQL, createSchemaSQL, markSchemaSQL} {
		if _, err := pool.Exec(ctx, sqlFor(q, t)); err != nil {
			return fmt.Errorf("recreate schema %s: %w", schema, err)
		}
	}
	return nil
}

// dropSchema drops a schema Run created.
func dropSchema(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := pool.Exec(ctx, sqlFor(dropSchemaSQL, outbox.Table{Schema: schema})); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}

// prepareOutbox recreates schema and migrates the outbox table in it;
// without notify, inserts into it do not notify.
func prepareOutbox(ctx context.Context, pool *pgxpool.Pool, schema string, notify bool, opts migrations.Options) (outbox.Table, error) {
	if err := resetSchema(ctx, pool, schema); err != nil {
		return outbox.Table{Schema: schema, Name: outbox.DefaultTable}, err
	}
	return migrateOutbox(ctx, pool, schema, notify, opts)
}

// migrateOutbox migrates the outbox table in schema, which exists, with
// package migrations; without notify, inserts into it do not notify.
func migrateOutbox(ctx context.Context, pool *pgxpool.Pool, schema string, notify bool, opts migrations.Options) (outbox.Table, error) {
	table := outbox.Table{Schema: schema, Name: outbox.DefaultTable}
	if _, err := migrations.UpWith(ctx, pool, table, opts); err != nil {
		return table, fmt.Errorf("migrate %s: %w", table, err)
	}
	if !notify {
		q := "ALTER TABLE " + table.Ident() + " DISABLE TRIGGER " + pgx.Identifier{table.Name + "_notify"}.Sanitize()
		if _, err := pool.Exec(ctx, q); err != nil {
			return table, fmt.Errorf("disable the notify trigger of %s: %w", table, err)
		}
	}
	return table, nil
}

// vacuumAnalyze runs VACUUM ANALYZE on the table.
func vacuumAnalyze(ctx context.Context, pool *pgxpool.Pool, table outbox.Table) error {
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table.Ident()); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	return nil
}

// tableHealth is one reading of tableStatsSQL.
type tableHealth struct {
	deadTuples, autovacuums, size int64
}

// readTableHealth reads the table's statistics (see freshStatistics).
func readTableHealth(ctx context.Context, pool *pgxpool.Pool, table outbox.Table) (tableHealth, error) {
	var h tableHealth
	err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		if err := freshStatistics(ctx, c); err != nil {
			return err
		}
		return c.QueryRow(ctx, tableStatsSQL, table.Ident()).Scan(&h.deadTuples, &h.autovacuums, &h.size)
	})
	if err != nil {
		return h, fmt.Errorf("statistics of %s: %w", table, err)
	}
	return h, nil
}

// freshStatistics flushes the session's pending statistics and drops its
// cached snapshot, so that the next reading on c includes everything
// reported so far. Other backends report theirs at least once a second
// while busy, and when they exit.
func freshStatistics(ctx context.Context, c *pgxpool.Conn) error {
	if serverVersion(ctx, c) >= 150000 { // pg_stat_force_next_flush is new in 15
		if _, err := c.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
			return err
		}
	}
	_, err := c.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	return err
}

// serverVersion returns server_version_num (150004 for 15.4), 0 when
// unknown.
func serverVersion(ctx context.Context, c *pgxpool.Conn) int {
	var v int
	if err := c.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
		return 0
	}
	return v
}

// backendPIDs returns the pids of the backends serving the given
// application names.
func backendPIDs(ctx context.Context, pool *pgxpool.Pool, appNames []string) ([]int, error) {
	rows, err := pool.Query(ctx, backendsSQL, appNames)
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("list backends: %w", err)
	}
	return pids, nil
}

// awaitBackendsGone waits (up to 10s) until the relays' backends have
// exited, which is when they report their last statistics.
func awaitBackendsGone(ctx context.Context, pool *pgxpool.Pool, appNames []string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := backendPIDs(ctx, pool, appNames)
		if err != nil || len(pids) == 0 || time.Now().After(deadline) {
			return err
		}
		wait(ctx, 20*time.Millisecond) // polling the server; nothing to wait on
	}
}

// unfinished reports whether any row is still pending or processing.
func unfinished(ctx context.Context, pool *pgxpool.Pool, table outbox.Table) (bool, error) {
	var yes bool
	if err := pool.QueryRow(ctx, sqlFor(unfinishedSQL, table)).Scan(&yes); err != nil {
		return false, fmt.Errorf("poll %s: %w", table, err)
	}
	return yes, nil
}

// statusCounts counts the rows per status.
func statusCounts(ctx context.Context, pool *pgxpool.Pool, table outbox.Table) (map[string]int, error) {
	rows, err := pool.Query(ctx, sqlFor(statusCountsSQL, table))
	if err != nil {
		return nil, fmt.Errorf("count %s: %w", table, err)
	}
	out := map[string]int{}
	var status string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		out[status] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count %s: %w", table, err)
	}
	return out, nil
}

// dbClock returns the database's clock_timestamp().
func dbClock(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	var t time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t); err != nil {
		return t, fmt.Errorf("read the database clock: %w", err)
	}
	return t, nil
}

// lastSent returns the latest sent_at of the table.
func lastSent(ctx context.Context, pool *pgxpool.Pool, table outbox.Table) (time.Time, error) {
	var t *time.Time
	if err := pool.QueryRow(ctx, sqlFor(lastSentSQL, table)).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("last sent_at of %s: %w", table, err)
	}
	if t == nil {
		return time.Time{}, fmt.Errorf("no row of %s was sent", table)
	}
	return *t, nil
}

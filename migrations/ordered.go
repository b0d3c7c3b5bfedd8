package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// OrderedFillfactor is the fillfactor PrepareOrdered gives the primary key
// of a table that delivers in order: its pages are built and split half
// full, where PostgreSQL's default is 90.
//
// Why: every write-back adds a second primary-key entry per row (the
// update is never HOT), and an ordered write-back's rows lie one shard's
// in sixteen across the table, so it adds entries to many leaf pages at
// once; on full pages PostgreSQL searched for dead entries to delete
// again and again. Half-full pages hold the new entries until VACUUM
// removes the old ones (docs/ordering.md#the-primary-key-half-full). The
// cost is on batch writers, whose inserts split twice as many pages
// (BenchmarkWriteBatch, docs/benchmarks.md), which is why only
// PrepareOrdered sets it.
const OrderedFillfactor = 50

// primaryKeysSQL lists the primary keys that hold entries of the table
// $1 (its own, or each partition's: a partitioned table's key cannot be
// altered and holds none), with their fillfactor, 0 when it is unset
// (PostgreSQL's default, 90).
const primaryKeysSQL = `SELECT n.nspname, i.relname, coalesce((
    SELECT option_value::int
    FROM pg_options_to_table(i.reloptions)
    WHERE option_name = 'fillfactor'
), 0)
FROM (
    SELECT $1::regclass AS relid
    UNION
    SELECT relid FROM pg_partition_tree($1::regclass)
) AS t
JOIN pg_constraint AS c ON c.conrelid = t.relid AND c.contype = 'p'
JOIN pg_class AS i ON i.oid = c.conindid AND i.relkind = 'i'
JOIN pg_namespace AS n ON n.oid = i.relnamespace
ORDER BY 1, 2`

// primaryKey is a primary key of the table and its fillfactor (0: unset).
type primaryKey struct {
	// name is quoted and schema-qualified.
	name       string
	fillfactor int
}

// primaryKeys lists the keys primaryKeysSQL reads.
func primaryKeys(ctx context.Context, q Querier, table outbox.Table) ([]primaryKey, error) {
	rows, err := q.Query(ctx, primaryKeysSQL, table.Ident())
	if err != nil {
		return nil, fmt.Errorf("migrations: list the primary keys of %s: %w", table, err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (primaryKey, error) {
		var schema, name string
		var fillfactor int
		err := r.Scan(&schema, &name, &fillfactor)
		return primaryKey{pgx.Identifier{schema, name}.Sanitize(), fillfactor}, err
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: list the primary keys of %s: %w", table, err)
	}
	return keys, nil
}

// PrepareOrdered prepares table, migrated, for ordered delivery
// (`relay migrate up --ordered`): it sets OrderedFillfactor on its
// primary key, or on each partition's for a partitioned table, whose
// partitions created later follow (CreatePartitions). It returns the keys
// it altered, none when the table was prepared already.
//
// The setting takes effect as pages are built or split, and takes only a
// SHARE UPDATE EXCLUSIVE lock on each key: readers and writers go on. The
// pages of a key that holds rows already keep their fill until
// `REINDEX INDEX CONCURRENTLY <key>` rebuilds them, without blocking
// writers either.
func PrepareOrdered(ctx context.Context, db DB, table outbox.Table) (altered []string, err error) {
	if err := table.Validate(); err != nil {
		return nil, err
	}
	table = table.WithDefaults()
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table.Ident()).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrations: look up %s: %w", table, err)
	}
	if !exists {
		return nil, fmt.Errorf("table %s: %w", table, ErrNotMigrated)
	}
	if err := lockPartitions(ctx, tx, table); err != nil {
		return nil, err
	}
	keys, err := primaryKeys(ctx, tx, table)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if k.fillfactor == OrderedFillfactor {
			continue
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER INDEX %s SET (fillfactor = %d)", k.name, OrderedFillfactor)); err != nil {
			return nil, fmt.Errorf("migrations: prepare %s for ordered delivery: %w", table, err)
		}
		altered = append(altered, k.name)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("migrations: prepare %s for ordered delivery: %w", table, err)
	}
	return altered, nil
}

// OrderedPrepared reports whether every primary key of table is at
// OrderedFillfactor, as PrepareOrdered leaves them. It only reads the
// catalog: the relay asks at start when it has ordered topics.
func OrderedPrepared(ctx context.Context, q Querier, table outbox.Table) (bool, error) {
	keys, err := primaryKeys(ctx, q, table.WithDefaults())
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if k.fillfactor != OrderedFillfactor {
			return false, nil
		}
	}
	return len(keys) > 0, nil
}

// lockPartitions takes, on a partitioned table, the SHARE UPDATE EXCLUSIVE
// lock that attaching a partition takes (readers and writers go on):
// PrepareOrdered and CreatePartitions hold it from the start, so that a
// partition is created either before PrepareOrdered lists the keys or
// after it committed, and follows it. It locks the table ONLY: a lock on
// each partition would make a VACUUM (SKIP_LOCKED) of the table skip it
// whole, and hold off autovacuum, each time the partitions job runs.
func lockPartitions(ctx context.Context, tx pgx.Tx, table outbox.Table) error {
	partitioned, err := IsPartitioned(ctx, tx, table)
	if err != nil || !partitioned {
		return err
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE ONLY "+table.Ident()+" IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		return fmt.Errorf("migrations: lock %s: %w", table, err)
	}
	return nil
}

// newKeyFillfactor is the fillfactor of a new partition's primary key
// (0: PostgreSQL's default): that of the newest partition's key, or the
// DEFAULT partition's when there is no range partition.
//
// The keys themselves are the marker of a table prepared for ordered
// delivery. The table cannot carry it (PostgreSQL refuses options on a
// partitioned index), and a marker of its own could disagree with the
// keys that the writers and the claims actually use. PrepareOrdered sets
// every key and migration 011 resets every key, so any partition tells;
// the newest one is the one an operator who changed a key by hand
// changed last.
func newKeyFillfactor(ctx context.Context, tx pgx.Tx, table outbox.Table, existing []Partition) (int, error) {
	newest := outbox.Table{Schema: table.Schema}
	if len(existing) > 0 {
		newest.Name = existing[len(existing)-1].Name
	} else {
		def, ok, err := DefaultPartition(ctx, tx, table)
		if err != nil || !ok {
			return 0, err
		}
		newest.Name = def
	}
	keys, err := primaryKeys(ctx, tx, newest)
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	return keys[0].fillfactor, nil
}

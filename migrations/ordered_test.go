package migrations_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// halfFullKeys counts the primary keys that hold table's rows (its own,
// or each partition's) and those of them at fillfactor 50.
func halfFullKeys(t *testing.T, pool *pgxpool.Pool, table outbox.Table) (half, all int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE i.reloptions @> '{fillfactor=50}'), count(*)
FROM (SELECT $1::regclass AS relid UNION ALL SELECT relid FROM pg_partition_tree($1::regclass)) AS t
JOIN pg_constraint AS c ON c.conrelid = t.relid AND c.contype = 'p'
JOIN pg_class AS i ON i.oid = c.conindid AND i.relkind = 'i'`, table.Ident()).Scan(&half, &all)
	if err != nil {
		t.Fatal(err)
	}
	return half, all
}

// wantKeys fails the test unless half of all table's keys are at
// fillfactor 50 and OrderedPrepared says prepared.
func wantKeys(t *testing.T, pool *pgxpool.Pool, table outbox.Table, when string, half, all int, prepared bool) {
	t.Helper()
	if h, a := halfFullKeys(t, pool, table); h != half || a != all {
		t.Errorf("%s: %d of %d primary keys at fillfactor 50, want %d of %d", when, h, a, half, all)
	}
	if ok, err := migrations.OrderedPrepared(context.Background(), pool, table); err != nil || ok != prepared {
		t.Errorf("%s: OrderedPrepared = %v, %v; want %v", when, ok, err, prepared)
	}
}

// Up leaves the primary key at PostgreSQL's default fillfactor, so batch
// writers pay nothing for ordered delivery; PrepareOrdered sets 50 on it,
// once; migration 011 down restores 010's 50 and 011 up resets it.
func TestPrepareOrderedPlainTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.NewEmpty(t)
	if _, err := migrations.PrepareOrdered(ctx, pool, table); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Errorf("PrepareOrdered on a missing table = %v, want ErrNotMigrated", err)
	}
	if _, err := migrations.Up(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, pool, table, "after Up", 0, 1, false)
	altered, err := migrations.PrepareOrdered(ctx, pool, table)
	if err != nil || len(altered) != 1 || altered[0] != `"`+table.Schema+`"."outbox_pkey"` {
		t.Fatalf("PrepareOrdered = %q, %v; want the key", altered, err)
	}
	wantKeys(t, pool, table, "after PrepareOrdered", 1, 1, true)
	if altered, err := migrations.PrepareOrdered(ctx, pool, table); err != nil || len(altered) != 0 {
		t.Errorf("second PrepareOrdered = %q, %v; want nothing altered", altered, err)
	}

	if m, ok, err := migrations.Down(ctx, pool, table); err != nil || !ok || m.Version != 11 {
		t.Fatalf("Down = %d, %v, %v; want 011 reverted", m.Version, ok, err)
	}
	if _, _, err := migrations.Down(ctx, pool, table); err != nil { // 010 resets the key
		t.Fatal(err)
	}
	wantKeys(t, pool, table, "after 010 down", 0, 1, false)
	if _, err := migrations.Up(ctx, pool, table); err != nil { // 010 sets 50, 011 resets it
		t.Fatal(err)
	}
	wantKeys(t, pool, table, "after 010 and 011 up", 0, 1, false)
	if _, _, err := migrations.Down(ctx, pool, table); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, pool, table, "after 011 down", 1, 1, true)
}

// On a partitioned table, PrepareOrdered sets 50 on each partition's key
// (the DEFAULT partition's too), and partitions created later follow
// what the table was prepared for: the default before, 50 after.
func TestPrepareOrderedPartitionedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.NewEmpty(t)
	if _, err := migrations.UpWith(ctx, pool, table, migrations.Options{PartitionInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	parts, err := migrations.Partitions(ctx, pool, table)
	if err != nil {
		t.Fatal(err)
	}
	n := len(parts) + 1 // and the DEFAULT partition
	wantKeys(t, pool, table, "after UpWith", 0, n, false)

	more := func(when string) int {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		created, err := migrations.CreatePartitions(ctx, tx, table, 0, time.Duration(n+2)*time.Hour)
		if err != nil || len(created) == 0 {
			t.Fatalf("%s: CreatePartitions = %d, %v; want some created", when, len(created), err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		n += len(created)
		return len(created)
	}
	more("before PrepareOrdered")
	wantKeys(t, pool, table, "partitions created before PrepareOrdered", 0, n, false)

	altered, err := migrations.PrepareOrdered(ctx, pool, table)
	if err != nil || len(altered) != n {
		t.Fatalf("PrepareOrdered altered %d keys (%v), want %d", len(altered), err, n)
	}
	wantKeys(t, pool, table, "after PrepareOrdered", n, n, true)
	more("after PrepareOrdered")
	wantKeys(t, pool, table, "partitions created after PrepareOrdered", n, n, true)

	if _, _, err := migrations.Down(ctx, pool, table); err != nil { // 011: 50 as 010 left it
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, pool, table); err != nil { // 011 resets every key
		t.Fatal(err)
	}
	wantKeys(t, pool, table, "after 011 down and up", 0, n, false)
	more("after 011")
	wantKeys(t, pool, table, "partitions created after 011", 0, n, false)
}

// CreatePartitions and PrepareOrdered lock the partitioned table alone,
// never its partitions: a lock on each partition would make a VACUUM
// (SKIP_LOCKED) of the table, the retention janitor's, skip the whole
// table while the partitions job runs, and hold off autovacuum.
func TestPartitionJobsLockOnlyTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.NewEmpty(t)
	if _, err := migrations.UpWith(ctx, pool, table, migrations.Options{PartitionInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for name, job := range map[string]func(tx pgx.Tx) error{
		"CreatePartitions": func(tx pgx.Tx) error {
			_, err := migrations.CreatePartitions(ctx, tx, table, 0, time.Hour)
			return err
		},
		"PrepareOrdered": func(tx pgx.Tx) error {
			_, err := migrations.PrepareOrdered(ctx, tx, table) // a savepoint in tx
			return err
		},
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := job(tx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var parent, partitions int
		err = tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE t.level = 0), count(*) FILTER (WHERE t.level > 0)
FROM pg_locks AS l JOIN pg_partition_tree($1::regclass) AS t ON t.relid = l.relation
WHERE l.pid = pg_backend_pid() AND l.mode = 'ShareUpdateExclusiveLock'`, table.Ident()).Scan(&parent, &partitions)
		tx.Rollback(ctx) //nolint:errcheck // the check is done
		if err != nil {
			t.Fatal(err)
		}
		if parent != 1 || partitions != 0 {
			t.Errorf("%s holds SHARE UPDATE EXCLUSIVE on %d tables and %d partitions, want the table alone", name, parent, partitions)
		}
	}
}

package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Up applies every migration once and is idempotent; Status lists what was
// applied; Down reverts, after which Check and the relay report
// ErrNotMigrated.
func TestMigrationsLifecycle(t *testing.T) {
	t.Parallel()
	pool, table := testdb.NewEmpty(t)
	ctx := context.Background()
	all, err := migrations.All()
	if err != nil || len(all) == 0 {
		t.Fatalf("All() = %v, %v", all, err)
	}

	if err := migrations.Check(ctx, pool, table); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Errorf("Check on a missing schema = %v, want ErrNotMigrated", err)
	}
	applied, err := migrations.Up(ctx, pool, table)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	if len(applied) != len(all) {
		t.Errorf("first Up applied %d migrations, want %d", len(applied), len(all))
	}
	if err := migrations.Check(ctx, pool, table); err != nil {
		t.Errorf("Check after Up: %v", err)
	}
	again, err := migrations.Up(ctx, pool, table)
	if err != nil || len(again) != 0 {
		t.Errorf("second Up = %v, %v; want nothing applied", again, err)
	}

	states, err := migrations.Status(ctx, pool, table)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if len(states) != len(all) {
		t.Fatalf("Status lists %d migrations, want %d", len(states), len(all))
	}
	for i, s := range states {
		if s.Version != all[i].Version || !s.Applied() || time.Since(s.AppliedAt) > time.Hour {
			t.Errorf("Status[%d] = version %d, applied at %v; want version %d, applied just now", i, s.Version, s.AppliedAt, all[i].Version)
		}
	}
	if migrations.Latest() != all[len(all)-1].Version {
		t.Errorf("Latest() = %d, want %d", migrations.Latest(), all[len(all)-1].Version)
	}

	for i := len(all) - 1; i >= 0; i-- {
		reverted, ok, err := migrations.Down(ctx, pool, table)
		if err != nil || !ok || reverted.Version != all[i].Version {
			t.Fatalf("Down = %v, %v, %v; want version %d reverted", reverted.Version, ok, err, all[i].Version)
		}
	}
	if _, ok, err := migrations.Down(ctx, pool, table); ok || err != nil {
		t.Errorf("Down with nothing applied = %v, %v; want false, nil", ok, err)
	}
	if err := migrations.Check(ctx, pool, table); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Errorf("Check after Down = %v, want ErrNotMigrated", err)
	}
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table.Ident()).Scan(&exists); err != nil || exists {
		t.Errorf("outbox table still exists after Down (%v)", err)
	}
	states, err = migrations.Status(ctx, pool, table)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Applied() {
			t.Errorf("Status after Down: version %d still applied", s.Version)
		}
	}

	r, err := relay.New(pool, &sink{}, relay.Config{Table: table, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkRunNotMigrated(t, r)
}

// Five replicas running Up at once on a fresh schema all succeed; exactly
// one applies the migrations.
func TestMigrationsConcurrentUp(t *testing.T) {
	t.Parallel()
	pool, table := testdb.NewEmpty(t)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	const replicas = 5
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		applied [replicas]int
		errs    [replicas]error
	)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ms, err := migrations.Up(context.Background(), pool, table)
			applied[i], errs[i] = len(ms), err
		}()
	}
	close(start)
	wg.Wait()
	appliers := 0
	for i := range replicas {
		if errs[i] != nil {
			t.Errorf("replica %d: Up: %v", i, errs[i])
		}
		switch applied[i] {
		case 0:
		case len(all):
			appliers++
		default:
			t.Errorf("replica %d applied %d of %d migrations", i, applied[i], len(all))
		}
	}
	if appliers != 1 {
		t.Errorf("%d replicas applied the migrations, want exactly 1 (applied: %v)", appliers, applied)
	}
	if err := migrations.Check(context.Background(), pool, table); err != nil {
		t.Errorf("Check after concurrent Up: %v", err)
	}
}

// A relay started on a schema nobody migrated stops at once with an error
// that wraps ErrNotMigrated and tells the operator what to run.
func TestRelayOnUnmigratedTable(t *testing.T) {
	t.Parallel()
	pool, table := testdb.NewEmpty(t)
	r, err := relay.New(pool, &sink{}, relay.Config{Table: table, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkRunNotMigrated(t, r)
}

func checkRunNotMigrated(t *testing.T, r *relay.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := r.Run(ctx)
	if ctx.Err() != nil {
		t.Fatal("Run kept waiting on an unmigrated table instead of returning")
	}
	if !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("Run = %v, want an error wrapping migrations.ErrNotMigrated", err)
	}
	if !strings.Contains(err.Error(), "relay migrate up") {
		t.Errorf("Run error %q does not say to run `relay migrate up`", err)
	}
}

// Migration 008 gives shards ranges of buckets, and fences replicas on the
// old mapping off: their shard table is gone, so their next lease, extend
// or claim of ordered rows fails instead of serving keys a new replica
// serves. 008 down fences the other way.
func TestMigration008FencesTheOldShardMapping(t *testing.T) {
	t.Parallel()
	pool, table := testdb.NewEmpty(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, pool, table); err != nil {
		t.Fatalf("Up: %v", err)
	}
	for _, want := range []int{11, 10, 9, 8} {
		if m, ok, err := migrations.Down(ctx, pool, table); err != nil || !ok || m.Version != want {
			t.Fatalf("Down = %v, %v, %v; want %03d reverted", m.Version, ok, err, want)
		}
	}
	// What a replica of 007 runs: it holds shard 3 and extends its lease.
	oldShards, newShards := table.Related("shards"), table.Related("shard_ranges")
	extend := "UPDATE " + oldShards + " SET locked_until = now() + interval '30 s' WHERE shard = 3 AND locked_by = 'old#1'"
	mustExec := func(q string) {
		t.Helper()
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustExec("INSERT INTO " + oldShards + " (shard, locked_by, locked_until) VALUES (3, 'old#1', now() + interval '30 s')")
	mustExec(extend)
	exists := func(name string) bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if exists(newShards) {
		t.Errorf("%s exists at 007", newShards)
	}

	if _, err := migrations.Up(ctx, pool, table); err != nil {
		t.Fatalf("Up: %v", err)
	}
	_, err := pool.Exec(ctx, extend)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Errorf("a replica of 007 extending its lease after 008: %v, want undefined_table (42P01)", err)
	}
	if !exists(newShards) {
		t.Errorf("%s is missing after 008", newShards)
	}

	for _, want := range []int{11, 10, 9, 8} {
		if m, ok, err := migrations.Down(ctx, pool, table); err != nil || !ok || m.Version != want {
			t.Fatalf("Down = %v, %v, %v; want %03d reverted", m.Version, ok, err, want)
		}
	}
	if exists(newShards) || !exists(oldShards) {
		t.Errorf("after 008 down: %s exists %v, %s exists %v; want only the old table", newShards, exists(newShards), oldShards, exists(oldShards))
	}
}

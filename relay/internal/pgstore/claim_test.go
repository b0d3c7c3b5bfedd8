package pgstore

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// On a partitioned table the claims read from an id bound a minute before
// their floor, and their plans leave out the partitions below it; on an
// unpartitioned table, and from the store.Bottom, there is no bound.
func TestPartitionedClaimsPlanOnlyThePartitionsFromTheirBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, parts := testdb.PartitionedWithPending(t, 1)
	s := newStore(t, pool, table)
	from := floorAt(parts[2].From.Add(claimBoundMargin))
	bound, err := s.claimBound(ctx, from)
	if err != nil || bound == nil || *bound != [16]byte(parts[2].Lower()) {
		t.Fatalf("claimBound = %v, %v; want the first id of partition %s", bound, err, parts[2].Name)
	}
	if b, err := s.claimBound(ctx, store.Bottom); err != nil || b != nil {
		t.Errorf("claimBound from the store.Bottom = %v, %v; want none", b, err)
	}
	plan := func(bound *[16]byte) string {
		return explainPlan(t, pool, s.q.claim, s.claimArgs("test#1", 100, store.ClaimRange{From: from, Lapsed: true}, bound, false))
	}
	bounded, unbounded := plan(bound), plan(nil)
	for i, p := range parts {
		switch {
		case !strings.Contains(unbounded, p.Name):
			t.Fatalf("the claim without a bound does not read partition %s: the test no longer tells the two apart:\n%s", p.Name, unbounded)
		case i < 2 && strings.Contains(bounded, p.Name):
			t.Errorf("the bounded claim reads partition %s, below its bound:\n%s", p.Name, bounded)
		case i >= 2 && !strings.Contains(bounded, p.Name):
			t.Errorf("the bounded claim does not read partition %s, from its bound up:\n%s", p.Name, bounded)
		}
	}

	plain, ptable := testdb.NewUnpartitioned(t)
	ps := newStore(t, plain, ptable)
	if b, err := ps.claimBound(ctx, floorAt(time.Now())); err != nil || b != nil {
		t.Errorf("claimBound on an unpartitioned table = %v, %v; want none", b, err)
	}
}

// A due row below the claims' id bound (an old event retried or replayed,
// say) is not read by the claims from the floor: the look finds it, and
// the claim after the look takes it by id.
func TestRowsBelowTheClaimBoundAreFoundByTheLook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, parts := testdb.PartitionedWithPending(t, 0)
	s := newStore(t, pool, table)
	// An event written two hours ago (in the DEFAULT partition: no
	// partition holds that hour), due again now.
	old := uuid.UUID(migrations.BoundID(time.Now().Add(-2 * time.Hour)))
	old[15] = 1
	if _, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+" (id, topic, payload, next_retry_at) VALUES ($1, 'orders', '\\x00', now() - interval '1 second')", old.String()); err != nil {
		t.Fatal(err)
	}
	// The floor ten seconds back: the row is above it, but its id is below
	// the bound.
	var dbNow time.Time
	if err := pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	from := floorAt(dbNow.Add(-10 * time.Second))
	rows, _, err := s.Claim(ctx, "test#1", 10, store.ClaimRange{From: from, Lapsed: true}, nil)
	if err != nil || len(rows) != 0 {
		t.Fatalf("claim from the floor = %d rows, %v; want none: the row is below its id bound", len(rows), err)
	}
	found, full, err := s.LookBelow(ctx, from, 10)
	if err != nil || full || !slices.Contains(found, [16]byte(old)) || len(found) != 1 {
		t.Fatalf("look = %v (full %v), %v; want the row below the bound alone", found, full, err)
	}
	rows, _, err = s.Claim(ctx, "test#2", 10, store.ClaimRange{From: from, Swept: found}, nil)
	if err != nil || len(rows) != 1 || rows[0].ID != old {
		t.Fatalf("claim of what the look found = %d rows, %v; want the row", len(rows), err)
	}

	// A row in a partition below the bound: the claim that takes it by id
	// must lower its bound, or its update would not reach the partition.
	var now uuid.UUID
	if err := pool.QueryRow(ctx, "INSERT INTO "+table.Ident()+" (topic, payload) VALUES ('orders', '\\x00') RETURNING id").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now.String() < parts[0].Lower().String() || now.String() >= parts[0].Upper().String() {
		t.Fatalf("the new row %s is not in partition %s", now, parts[0].Name)
	}
	ahead := floorAt(parts[2].From.Add(claimBoundMargin))
	found, _, err = s.LookBelow(ctx, ahead, 10)
	if err != nil || !slices.Contains(found, [16]byte(now)) {
		t.Fatalf("look below a floor two partitions ahead = %v, %v; want the new row", found, err)
	}
	rows, _, err = s.Claim(ctx, "test#3", 10, store.ClaimRange{From: ahead, Swept: found}, nil)
	if err != nil || len(rows) != 1 || rows[0].ID != now {
		t.Fatalf("claim of the row below the bound = %d rows, %v; want it", len(rows), err)
	}
}

package pgstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// defaultBounds are the relay's default byte bounds (BatchBytes,
// MaxEventBytes).
var defaultBounds = store.Bounds{Batch: 4 << 20, Event: 16 << 20}

// everything is the range of a claim that reads every pending row and
// every lapsed lease, from the oldest.
var everything = store.ClaimRange{From: store.Bottom, Lapsed: true}

// newStore returns the store of table on pool, with a lease of 30s and
// no ordered topics.
func newStore(t testing.TB, pool *pgxpool.Pool, table outbox.Table) *Store {
	t.Helper()
	return New(pool, Config{Table: table, Lease: 30 * time.Second, Bounds: defaultBounds})
}

// claimAll claims every row of s's table, n of them, for owner.
func claimAll(t *testing.T, s *Store, owner string, n int) ([]store.Row, []uuid.UUID) {
	t.Helper()
	rows, _, err := s.Claim(context.Background(), owner, n, store.ClaimRange{From: store.Bottom}, nil)
	if err != nil || len(rows) != n {
		t.Fatalf("claim = %d rows, %v; want %d", len(rows), err, n)
	}
	ids := make([]uuid.UUID, n)
	for i := range rows {
		ids[i] = rows[i].ID
	}
	return rows, ids
}

// floorAt is a claim floor at t.
func floorAt(t time.Time) store.Floor {
	return store.Floor{Due: store.Time{Time: t, Valid: true}}
}

// orderedStore returns a store with every topic ordered over shards, on a
// new plain table holding n events of topic orders over keys keys, written
// in one transaction.
func orderedStore(t *testing.T, shards, n, keys int) (*pgxpool.Pool, outbox.Table, *Store) {
	t.Helper()
	ctx := context.Background()
	pool, table := testdb.NewUnpartitioned(t)
	s := New(pool, Config{Table: table, Lease: 30 * time.Second, Bounds: defaultBounds, Topics: []string{"*"}, Shards: shards})
	if err := s.EnsureShards(ctx, shards); err != nil {
		t.Fatal(err)
	}
	testdb.WriteKeyed(t, pool, table, n, keys)
	return pool, table, s
}

// planCount reads the number after the last "name" (rows=, loops=) in a
// line of EXPLAIN ANALYZE.
func planCount(t *testing.T, line, name string) int {
	t.Helper()
	i := strings.LastIndex(line, name)
	var n int
	if _, err := fmt.Sscanf(line[i+len(name):], "%d", &n); i < 0 || err != nil {
		t.Fatalf("no %s in %q: %v", name, line, err)
	}
	return n
}

// sentOutcome is the outcome of c with every row sent.
func sentOutcome(c store.OrderedClaim) store.Outcome {
	var out store.Outcome
	for _, x := range c.Rows {
		out.Sent = append(out.Sent, x.ID)
	}
	return out
}

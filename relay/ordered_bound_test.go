package relay

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An ordered claim that runs out of time (here: waiting for a lock on its
// shard's row) halves the loop's next claim, down to a single row.
func TestOrderedClaimThatTimesOutHalvesTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, r := orderedRelay(t, 1, 10, 10)
	r.pipe.cfg.Lease = time.Second // the claim's time bound
	shard, ok, err := r.shards.LeaseShard(ctx, "lessee")
	if err != nil || !ok {
		t.Fatalf("leaseShard = %v, %v", ok, err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // only a lock
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+table.Related("shard_ranges")+" FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	c := &shardClaims{shards: r.shards, pipe: r.pipe, shard: shard, lessee: "lessee"}
	for _, want := range []int{r.cfg.BatchMin / 2, r.cfg.BatchMin / 4} {
		limit := r.orderedSizes.next()
		_, _, err := r.pipe.processIn(ctx, c, limit, r.orderedSizes, nil, r.live.orderedSlot(0))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("claim of %d rows behind a lock: %v, want a timeout", limit, err)
		}
		if got := r.orderedSizes.next(); got != want {
			t.Fatalf("after a claim of %d rows timed out the next asks for %d, want %d", limit, got, want)
		}
	}
}

package relay

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The rows an ordered write-back keeps noted as claimed are those the
// outcome names in none of its lists: sent, released, retried, failed.
func TestWithoutOutcomeListsTheRowsNoOutcomeNames(t *testing.T) {
	ids := make([]uuid.UUID, 6)
	rows := make([]store.Row, len(ids))
	for i := range ids {
		ids[i] = uuid.New()
		rows[i] = store.Row{ID: ids[i]}
	}
	out := &outcome{
		Outcome:  store.Outcome{Sent: ids[:1], Retries: []store.Retry{{ID: ids[2]}}, Failures: []store.Failure{{ID: ids[3]}}},
		released: ids[1:2],
	}
	got := withoutOutcome(rows, out)
	if len(got) != 2 || got[0] != ids[4] || got[1] != ids[5] {
		t.Errorf("withoutOutcome = %v, want %v", got, ids[4:])
	}
	out.Sent = append([]uuid.UUID{ids[0]}, ids[4:]...)
	if got := withoutOutcome(rows, out); len(got) != 0 {
		t.Errorf("withoutOutcome of a batch with every outcome = %v, want none", got)
	}
}

// orderedRelay returns a relay with every topic ordered over shards, on a
// new plain table holding n events of topic orders over keys keys, written
// in one transaction.
func orderedRelay(t *testing.T, shards, n, keys int) (*pgxpool.Pool, outbox.Table, *Relay) {
	t.Helper()
	ctx := context.Background()
	pool, table := testdb.NewUnpartitioned(t)
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "ordered", Ordering: Ordering{Topics: []string{"*"}, Shards: shards}})
	if err := r.shards.EnsureShards(ctx, shards); err != nil {
		t.Fatal(err)
	}
	testdb.WriteKeyed(t, pool, table, n, keys)
	return pool, table, r
}

// The ordered loop leaves a shard's last write-back to the hand-back: when
// serve returns, the last batch's rows are published but still pending,
// and no Observer has heard of them; the hand-back writes them sent and
// reports them.
func TestServeLeavesTheLastWriteBackToTheHandBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, _ := orderedRelay(t, 1, 25, 5)
	var reported atomic.Int64
	r := quietRelay(t, pool, nopPublisher{}, Config{
		Table: table, ID: "serve", BatchMin: 10, BatchSize: 10,
		Ordering: Ordering{Topics: []string{"*"}, Shards: 1},
		Observer: ObserverFunc(func(e Event) {
			if e.Kind == EventRecorded {
				reported.Add(int64(e.Result.Sent))
			}
		}),
	})
	lessee := r.tokens.next()
	shard, ok, err := r.shards.LeaseShard(ctx, lessee)
	if err != nil || !ok {
		t.Fatalf("leaseShard = %v, %v", ok, err)
	}
	c := &shardClaims{shards: r.shards, pipe: r.pipe, shard: shard, lessee: lessee}
	claimed, wait, abandoned := c.serve(ctx, r.orderedSizes, nil)
	if claimed != 25 || wait != 0 || abandoned || c.waiting == nil {
		t.Fatalf("serve = %d claimed, wait %v, abandoned %v, waiting %v; want 25, 0, false, a write-back", claimed, wait, abandoned, c.waiting != nil)
	}
	last := len(c.waiting.Out.Sent)
	count := func(status string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status = $1", status).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if last == 0 || count("pending") != last || reported.Load() != int64(25-last) {
		t.Fatalf("before the hand-back: %d pending, %d reported sent; want the last batch's %d pending, the other %d reported", count("pending"), reported.Load(), last, 25-last)
	}
	if err := c.handBack(ctx); err != nil || c.waiting != nil {
		t.Fatalf("handBack = %v, waiting %v; want nil, none", err, c.waiting != nil)
	}
	if count("sent") != 25 || reported.Load() != 25 {
		t.Fatalf("after the hand-back: %d sent, %d reported; want 25, 25", count("sent"), reported.Load())
	}
}

package integration

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Leasing a shard reads the ordered index once per bucket of each free
// shard it considers, whatever the backlog: with 40,000 events over four
// keys of one shard and the other shards empty, it reads a few rows per
// bucket, not the backlog once per shard (which the planner chose when
// the look was one scan of every bucket of a shard). It counts what the
// lease reads; it does not time it.
func TestLeaseShardReadIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(`INSERT INTO `+b.table.Related("shard_ranges")+` (shard) SELECT s FROM generate_series(0, $1 - 1) AS s`, claimShards)
	var keys []string
	for _, bucket := range []int16{0, 16, 32, 48} {
		keys = append(keys, b.keysIn(bucket, 1)...)
	}
	const backlog = 40000
	b.exec(`INSERT INTO {{table}} (topic, key, payload)
		SELECT 'orders', convert_to(($1::text[])[1 + g % 4], 'UTF8'), '\x00'
		FROM generate_series(0, $2 - 1) AS g`, keys, backlog)
	b.exec("ANALYZE {{table}}")
	// Transactions of other tests on the server hold the horizon back:
	// on a loaded host, for more than 10 s.
	await(t, 2*time.Minute, func() bool {
		return b.count("tx >= pg_snapshot_xmin(pg_current_snapshot())") == 0
	}, "the backlog's transaction is not below the visibility horizon")

	cost := b.explain(b.relaySQL("lease_shard"), pgx.NamedArgs{"lease_ms": 60000, "lessee": "lessee#2", "shards": claimShards,
		"all_ordered": true, "ordered_topics": []string{}})
	t.Logf("leasing a shard read %.0f rows, %d buffers (%d in all)", cost.rows, cost.buffers, cost.total)
	if cost.out != 1 {
		t.Fatalf("leased %.0f shards, want 1 (shard 0 has the work)", cost.out)
	}
	// At most one row per bucket of the 16 shards, and the lapsed look;
	// an index probe is a few buffers.
	if cost.rows > 1024+100 {
		t.Errorf("leasing a shard read %.0f rows of a %d-event backlog, want about one per bucket", cost.rows, backlog)
	}
	var parts int64 // a partitioned table's buckets are probed in each partition
	if err := b.pool.QueryRow(b.ctx, "SELECT greatest(count(*), 1) FROM pg_inherits WHERE inhparent = $1::regclass", b.table.Ident()).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if limit := 4 * 1024 * parts; cost.buffers > limit {
		t.Errorf("leasing a shard read %d buffers, want at most 4 per bucket and partition (%d)", cost.buffers, limit)
	}
}

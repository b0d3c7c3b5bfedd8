package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
)

// What the ordered statements read does not grow with the backlog,
// whatever it holds: here a backlog of rows of a topic that is not
// ordered, or of ordered rows whose retry is an hour away, with a few due
// rows of other keys behind it. The lease's look and the claim each read
// about as many buffers with three times the backlog; when every test on
// a row was made while walking an index (its topic, its due time), both
// read the whole backlog (docs/ordering.md#how-the-claim-stays-bounded). One shard of
// 1,024 buckets, so that every bucket is full past the claim's first pass.
func TestOrderedStatementsReadBoundedWhateverTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const limit = 100
	read := func(t *testing.T, shape string, n int) (lease, claim int) {
		pool, table := testdb.NewUnpartitioned(t)
		s := New(pool, Config{Table: table, Lease: 30 * time.Second, Bounds: defaultBounds, Topics: []string{"orders"}, Shards: 1})
		if err := s.EnsureShards(ctx, 1); err != nil {
			t.Fatal(err)
		}
		// n rows of the shape, then 10 due rows of other keys.
		topic, due := "clicks", "now()"
		if shape == "not due" {
			topic, due = "orders", "now() + interval '1 hour'"
		}
		q := `INSERT INTO ` + table.Ident() + ` (topic, key, payload, next_retry_at)
			SELECT $1, convert_to('k' || g, 'UTF8'), '\x00'::bytea, ` + due + ` FROM generate_series(1, $2) AS g
			UNION ALL
			SELECT 'orders', convert_to('due' || g, 'UTF8'), '\x00'::bytea, now() FROM generate_series(1, 10) AS g`
		if _, err := pool.Exec(ctx, q, topic, n); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
			t.Fatal(err)
		}
		testdb.AwaitReady(t, pool, table)
		all, topics := s.all, s.topics
		p := testdb.ExplainBuffers(t, pool, s.q.leaseShard, pgx.NamedArgs{"lease_ms": int64(60000), "lessee": "bound#1", "shards": 1,
			"all_ordered": all, "ordered_topics": topics})
		lease = p.SharedHit + p.SharedRead
		if _, err := pool.Exec(ctx, "UPDATE "+table.Related("shard_ranges")+" SET locked_by = 'bound#1', locked_until = now() + interval '1 hour'"); err != nil {
			t.Fatal(err)
		}
		// The claim's steps: every read runs, since the rows read are not
		// ready.
		buckets := bucketsOf(0, 1)
		c, e := claimExplained(t, s, 0, "bound#1", limit, windowsFor(limit, len(buckets)))
		if len(e.plans) != 4 {
			t.Fatalf("the claim ran %d statements (claimed %d rows), want its three reads and the take", len(e.plans), len(c.Rows))
		}
		claim = e.buffers()
		t.Logf("%s, backlog %d: the lease read %d buffers, the claim %d", shape, n, lease, claim)
		return lease, claim
	}
	for _, shape := range []string{"other topics", "not due"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			lease, claim := read(t, shape, 20000)
			lease3, claim3 := read(t, shape, 60000)
			if lease3 > lease*3/2+50 {
				t.Errorf("with three times the backlog the lease read %d buffers, want about %d", lease3, lease)
			}
			if claim3 > claim*3/2 {
				t.Errorf("with three times the backlog the claim read %d buffers, want about %d", claim3, claim)
			}
		})
	}
}

// A small claim reads in proportion less than a big one, down to a claim
// of a few rows (secondWindow): a claim that timed out halves the next, so
// that the next can finish. Here shard 0 of 64 (16 buckets) holds 20,000
// rows whose retry is an hour away, which every pass reads past.
func TestOrderedClaimReadsLessWhenSmaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.NewUnpartitioned(t)
	s := New(pool, Config{Table: table, Lease: 30 * time.Second, Bounds: defaultBounds, Topics: []string{"orders"}, Shards: 64})
	if err := s.EnsureShards(ctx, 64); err != nil {
		t.Fatal(err)
	}
	q := `INSERT INTO ` + table.Ident() + ` (topic, key, payload, next_retry_at)
		SELECT 'orders', k, '\x00'::bytea, now() + interval '1 hour'
		FROM (SELECT convert_to('k' || g, 'UTF8') AS k FROM generate_series(1, 400000) AS g) AS keys
		WHERE hashtextextended(encode(k, 'hex'), 0) & 1023 < 16
		LIMIT 20000`
	if _, err := pool.Exec(ctx, q); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	testdb.AwaitReady(t, pool, table)
	if _, err := pool.Exec(ctx, "UPDATE "+table.Related("shard_ranges")+" SET locked_by = 'small#1', locked_until = now() + interval '1 hour' WHERE shard = 0"); err != nil {
		t.Fatal(err)
	}
	buckets := bucketsOf(0, 64)
	claim := func(limit int) int {
		_, e := claimExplained(t, s, 0, "small#1", limit, windowsFor(limit, len(buckets)))
		return e.buffers()
	}
	big, small := claim(100), claim(4)
	t.Logf("the claim of 100 rows read %d buffers, of 4 rows %d", big, small)
	if small > big/4 {
		t.Errorf("a claim of 4 rows read %d buffers, one of 100 %d: want at most a quarter", small, big)
	}
}

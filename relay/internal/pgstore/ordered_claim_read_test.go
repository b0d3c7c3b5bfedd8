package pgstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Tests of which rows the ordered claim's steps pick
// (ordered_claim.go): the rows a read of the shard's whole backlog
// would take, through reads that do not grow with the backlog. They claim
// shard 0 of 16, leased to claimLessee, with windows from one row to the
// whole claim.

const (
	claimShards = 16
	claimLessee = "lessee#1"
)

// claimBundle is a table with its shard rows, shard 0 leased to
// claimLessee, and stores whose ordered topics are every topic (all) or
// orders (some).
type claimBundle struct {
	t         *testing.T
	ctx       context.Context
	pool      *pgxpool.Pool
	table     outbox.Table
	all, some *Store
}

func newClaimBundle(t *testing.T) *claimBundle {
	t.Helper()
	pool, table := testdb.New(t)
	newStore := func(topics ...string) *Store {
		return New(pool, Config{Table: table, Lease: time.Minute, Topics: topics, Shards: claimShards, Bounds: store.Bounds{Batch: 1 << 30, Event: 1 << 30}})
	}
	b := &claimBundle{t: t, ctx: context.Background(), pool: pool, table: table, all: newStore("*"), some: newStore("orders")}
	b.exec(`INSERT INTO {{shards}} (shard, locked_by, locked_until)
		SELECT s, CASE WHEN s = 0 THEN $2 END, CASE WHEN s = 0 THEN now() + interval '1 hour' ELSE '-infinity' END
		FROM generate_series(0, $1 - 1) AS s`, claimShards, claimLessee)
	return b
}

// sql names the bundle's tables in q.
func (b *claimBundle) sql(q string) string {
	return strings.NewReplacer("{{table}}", b.table.Ident(), "{{shards}}", b.table.Related("shard_ranges")).Replace(q)
}

func (b *claimBundle) exec(q string, args ...any) {
	b.t.Helper()
	if _, err := b.pool.Exec(b.ctx, b.sql(q), args...); err != nil {
		b.t.Fatalf("%s: %v", q, err)
	}
}

func (b *claimBundle) count(where string) int {
	b.t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, b.sql("SELECT count(*) FROM {{table}} WHERE "+where)).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// shardZero lists the buckets of shard 0 of claimShards: 0 to 63.
func shardZero() []int16 { return bucketsOf(0, claimShards) }

// keysIn returns n keys of bucket, in a fixed order.
func (b *claimBundle) keysIn(bucket int16, n int) []string {
	return testdb.KeysIn(b.t, b.pool, bucket, n)
}

// fatalIn ends the test after rolling tx back.
func (b *claimBundle) fatalIn(tx pgx.Tx, format string, args ...any) {
	b.t.Helper()
	_ = tx.Rollback(b.ctx)
	b.t.Fatalf(format, args...)
}

// counting is a batcher that counts the statements it sends.
type counting struct {
	batcher
	statements int
}

func (c *counting) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.statements += len(b.QueuedQueries)
	return c.batcher.SendBatch(ctx, b)
}

// claimIn runs in tx the ordered claim of up to limit rows of shard 0, of
// every topic or of topics (orders), with the windows w (a second window
// of 0: the relay's least, 4,096), and returns the claimed ids and
// whether its first read decided it (two statements: the read and the
// take).
func (b *claimBundle) claimIn(tx pgx.Tx, limit int, w claimWindows, topics []string) (ids []uuid.UUID, head bool) {
	b.t.Helper()
	if w.second == 0 {
		w.second = 4096
	}
	s := b.all
	if topics != nil {
		s = b.some
	}
	db := &counting{batcher: tx}
	c, _, err := s.claimOrderedIn(b.ctx, db, "claim#1", limit, 0, claimLessee, nil, w)
	if err != nil {
		b.fatalIn(tx, "claim: %v", err)
	}
	for _, x := range c.Rows {
		ids = append(ids, x.ID)
	}
	return ids, db.statements == 2
}

// fullClaimIn returns the ids fullClaimSQL picks in tx.
func (b *claimBundle) fullClaimIn(tx pgx.Tx, limit int, topics []string) []uuid.UUID {
	b.t.Helper()
	rows, err := tx.Query(b.ctx, b.sql(fullClaimSQL), limit, shardZero(), topics == nil, topics)
	if err != nil {
		b.fatalIn(tx, "full claim: %v", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		b.fatalIn(tx, "full claim: %v", err)
	}
	return ids
}

func compareUUID(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) }

// fullClaimSQL picks rows as the ordered claim does, from a read of every
// unfinished row of the shard's buckets $2 (of the ordered topics $3/$4):
// the $1 oldest rows of the runs of ready rows at the head of each key.
// It is the reference the claim, which reads in bounded passes, must
// agree with; it only reads.
const fullClaimSQL = `
WITH unfinished AS (
    SELECT o.id, o.topic, o.key, o.tx,
           o.next_retry_at <= now()
           AND o.tx < pg_snapshot_xmin(pg_current_snapshot()) AS ready
    FROM {{table}} AS o
    WHERE o.bucket = ANY($2::smallint[])
      AND o.status = 'pending'
      AND o.bucket IS NOT NULL
      AND ($3::bool OR o.topic = ANY($4::text[]))
    UNION ALL
    SELECT o.id, o.topic, o.key, o.tx,
           o.locked_until < now()
           AND o.tx < pg_snapshot_xmin(pg_current_snapshot()) AS ready
    FROM {{table}} AS o
    WHERE o.status = 'processing'
      AND o.bucket = ANY($2::smallint[])
      AND ($3::bool OR o.topic = ANY($4::text[]))
),
runs AS (
    SELECT id, tx,
           bool_and(ready) OVER (
               PARTITION BY topic, key
               ORDER BY tx, id
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS claimable
    FROM unfinished
)
SELECT id
FROM runs
WHERE claimable
ORDER BY tx, id
LIMIT $1`

// The bounded claim takes exactly the rows a read of the whole backlog
// takes, whatever the window: random tables of a few keys sharing buckets,
// with heads waiting for their retry, claims in flight and lapsed, rows
// above the visibility horizon and rows of another shard, claimed with
// windows from one row to the whole claim. Both run in one repeatable-read
// transaction, so that they see the same snapshot and the same now(), and
// the claim is rolled back.
func TestOrderedClaimTakesTheRowsAFullReadTakes(t *testing.T) {
	t.Parallel()
	b := newClaimBundle(t)
	var headTook, headLeft int
	// Three crowded buckets of shard 0, six with one key, and one key of
	// shard 1, which the claim must never take.
	var keys []string
	for _, bucket := range []int16{0, 16, 32} {
		keys = append(keys, b.keysIn(bucket, 4)...)
	}
	for _, bucket := range []int16{48, 50, 52, 56, 60, 63} {
		keys = append(keys, b.keysIn(bucket, 1)...)
	}
	keys = append(keys, b.keysIn(64, 1)...)

	// Wide rounds spread hundreds of rows over every key; small ones put
	// a dozen rows at most on two keys of one bucket and one of another,
	// where a window of a row or two ends between a key's rows.
	small := []string{keys[0], keys[1], keys[4]}
	for round := range 230 {
		rng := rand.New(rand.NewPCG(uint64(round), 19))
		b.exec(`DELETE FROM {{table}}`)
		if round < 30 {
			b.writeBacklog(randomBacklog(rng, keys, 20+rng.IntN(400)))
		} else {
			b.writeBacklog(randomBacklog(rng, small, 3+rng.IntN(10)))
		}
		for _, limit := range []int{1, 2, 3, 7, 50} {
			// A head window of one or three rows rarely decides, and the
			// passes run; the relay's (the claim, a quarter and 16) mostly
			// does.
			var windows []claimWindows
			for _, head := range []int{1, 3} {
				for _, window := range slices.Compact([]int{1, min(limit, 2), min(limit, 5), limit}) {
					windows = append(windows, claimWindows{head: head, first: window})
				}
			}
			windows = append(windows, claimWindows{head: limit + limit/4 + 16, first: limit})
			for _, w := range windows {
				tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
				if err != nil {
					t.Fatal(err)
				}
				// Every topic, or one: the other's rows are not ordered.
				var topics []string
				if rng.IntN(2) == 0 {
					topics = []string{"orders"}
				}
				want := b.fullClaimIn(tx, limit, topics)
				got, decided := b.claimIn(tx, limit, w, topics)
				if err := tx.Rollback(b.ctx); err != nil {
					t.Fatal(err)
				}
				slices.SortFunc(want, compareUUID)
				slices.SortFunc(got, compareUUID)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d, limit %d, windows %+v, topics %v: claimed %d rows %v, a full read takes %d rows %v",
						round, limit, w, topics, len(got), got, len(want), want)
				}
				// Both ways happen: the first read decides, or the reads
				// bucket by bucket run.
				if decided {
					headTook++
				} else {
					headLeft++
				}
			}
		}
	}
	// Both ways were tried: claims the first pass decided, and claims it
	// left to the bucket passes.
	if headTook == 0 || headLeft == 0 {
		t.Errorf("the first pass alone took rows in %d claims and nothing in %d: want some of each", headTook, headLeft)
	}
}

// Hand-picked tables where a pass must not decide on what lies past its
// cut (the last row it read of a full bucket, or of the shard in the first
// read). Keys K and M share one bucket, J and L another; each row's age is
// how far its transaction is below the horizon (older first). A head
// window of one row sends the claim on to the passes bucket by bucket.
func TestOrderedClaimCases(t *testing.T) {
	t.Parallel()
	b := newClaimBundle(t)
	km, jl := b.keysIn(0, 2), b.keysIn(16, 2)
	k, m, j, l := km[0], km[1], jl[0], jl[1]
	for _, c := range []struct {
		name    string
		limit   int
		windows claimWindows
		rows    []backlogRow
		want    []int // indexes into rows
	}{{
		// The first read takes K:0 and J:0: the lapsed claim L:0 beyond
		// it must not count as claimable, or the pick looks full and J:1
		// is left out.
		name: "a lapsed claim past the head cut", limit: 2, windows: claimWindows{head: 2, first: 1},
		rows: []backlogRow{
			{key: k, state: "retrying", age: 100}, {key: j, state: "pending", age: 95},
			{key: j, state: "pending", age: 85}, {key: l, state: "lapsed", age: 80},
		},
		want: []int{1, 2},
	}, {
		// K's head waits, and its rows fill the first read; the passes
		// reach M's.
		name: "a blocked key fills the head", limit: 2, windows: claimWindows{head: 3, first: 4},
		rows: []backlogRow{
			{key: k, state: "retrying", age: 100}, {key: k, state: "pending", age: 99}, {key: k, state: "pending", age: 98},
			{key: m, state: "pending", age: 97}, {key: m, state: "pending", age: 96},
		},
		want: []int{3, 4},
	}, {
		// The first read reaches the end of the shard: it decides with
		// fewer rows than the claim, and counts the lapsed claim L:0,
		// which no pending row comes after.
		name: "the head reaches the end", limit: 5, windows: claimWindows{head: 4, first: 1},
		rows: []backlogRow{
			{key: k, state: "retrying", age: 100}, {key: k, state: "pending", age: 99},
			{key: j, state: "pending", age: 95}, {key: l, state: "lapsed", age: 120},
		},
		want: []int{2, 3},
	}, {
		// The first pass reads K:0 of K's bucket: the lapsed claim K:2
		// beyond it must not count as claimable (K:1 waits), or the pick
		// looks full and J:1 is left out.
		name: "a lapsed claim past the first cut", limit: 3, windows: claimWindows{head: 1, first: 1},
		rows: []backlogRow{
			{key: k, state: "pending", age: 100}, {key: k, state: "retrying", age: 90}, {key: k, state: "lapsed", age: 80},
			{key: j, state: "pending", age: 70}, {key: j, state: "pending", age: 60},
		},
		want: []int{0, 3, 4},
	}, {
		// The second pass reads three rows of each bucket: M's, which
		// wait behind M:0, and L:0, J:0, J:1. The lapsed claim K:1 beyond
		// the cut must not count (K:0 waits), or J's bucket, cut at
		// J:1, is taken as decided and J:2 is left out.
		name: "a lapsed claim past the second cut", limit: 3, windows: claimWindows{head: 1, first: 1},
		rows: []backlogRow{
			{key: m, state: "retrying", age: 100}, {key: m, state: "pending", age: 99}, {key: m, state: "pending", age: 98},
			{key: k, state: "retrying", age: 97}, {key: k, state: "lapsed", age: 96},
			{key: l, state: "retrying", age: 95},
			{key: j, state: "pending", age: 94}, {key: j, state: "pending", age: 93}, {key: j, state: "pending", age: 92},
		},
		want: []int{6, 7, 8},
	}, {
		// K's head waits; its rows fill the first and second passes of
		// the bucket, and only the third reaches M's.
		name: "a blocked key fills both passes", limit: 2, windows: claimWindows{head: 1, first: 1},
		rows: []backlogRow{
			{key: k, state: "retrying", age: 100}, {key: k, state: "pending", age: 99},
			{key: k, state: "pending", age: 98}, {key: k, state: "pending", age: 97},
			{key: m, state: "pending", age: 96}, {key: m, state: "pending", age: 95}, {key: m, state: "pending", age: 94},
		},
		want: []int{4, 5},
	}, {
		// K's in-flight claim holds K back; rows above the horizon are
		// not read, and hold nothing back below it.
		name: "in flight and above the horizon", limit: 5, windows: claimWindows{head: 1, first: 1},
		rows: []backlogRow{
			{key: k, state: "inFlight", age: 100}, {key: k, state: "pending", age: 99},
			{key: m, state: "pending", age: 98}, {key: m, state: "pending", age: 0},
			{key: j, state: "pending", age: -1}, {key: l, state: "pending", age: 97},
		},
		want: []int{2, 5},
	}} {
		t.Run(c.name, func(t *testing.T) {
			b.exec(`DELETE FROM {{table}}`)
			ids := b.writeBacklog(c.rows)
			var want []uuid.UUID
			for _, i := range c.want {
				want = append(want, ids[i])
			}
			tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			full := b.fullClaimIn(tx, c.limit, nil)
			got, _ := b.claimIn(tx, c.limit, c.windows, nil)
			if err := tx.Rollback(b.ctx); err != nil {
				t.Fatal(err)
			}
			for _, s := range [][]uuid.UUID{want, full, got} {
				slices.SortFunc(s, compareUUID)
			}
			if !slices.Equal(full, want) {
				t.Fatalf("a full read takes %v, the case expects %v: the case is wrong", full, want)
			}
			if !slices.Equal(got, want) {
				t.Errorf("claimed %v, want %v", got, want)
			}
		})
	}
}

// backlogRow is one row of a test backlog.
type backlogRow struct {
	key, topic string
	// state is pending (due), retrying (pending, due in an hour),
	// inFlight (processing, its lease running), lapsed (processing, its
	// lease over) or sent.
	state string
	// age is how far below the visibility horizon its transaction id is;
	// 0 or less: above it, a transaction that has not ended.
	age int64
}

// writeBacklog writes rows, with ids in their order.
func (b *claimBundle) writeBacklog(rows []backlogRow) []uuid.UUID {
	b.t.Helper()
	var horizon int64
	if err := b.pool.QueryRow(b.ctx, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint").Scan(&horizon); err != nil {
		b.t.Fatal(err)
	}
	n := len(rows)
	ids := make([]uuid.UUID, n)
	keys := make([][]byte, n)
	topics := make([]string, n)
	statuses := make([]string, n)
	retryIn := make([]int, n) // seconds from now
	leaseIn := make([]*int, n)
	txs := make([]int64, n)
	for i, r := range rows {
		ids[i] = uuid.Must(uuid.NewV7())
		keys[i], topics[i] = []byte(r.key), r.topic
		if topics[i] == "" {
			topics[i] = "orders"
		}
		txs[i] = max(horizon-r.age, 3)
		if r.age <= 0 {
			txs[i] = horizon + 1_000_000_000 - r.age
		}
		statuses[i], retryIn[i] = "pending", -1
		switch r.state {
		case "retrying":
			retryIn[i] = 3600
		case "inFlight", "lapsed":
			statuses[i] = "processing"
			leaseIn[i] = new(int)
			*leaseIn[i] = map[string]int{"inFlight": 3600, "lapsed": -1}[r.state]
		case "sent":
			statuses[i] = "sent"
		}
	}
	b.exec(`INSERT INTO {{table}} (id, topic, key, payload, status, next_retry_at, locked_by, locked_until, tx)
		SELECT u.id, u.topic, u.key, '\x00', u.status,
		       now() + u.retry_in * interval '1 second',
		       CASE WHEN u.lease_in IS NOT NULL THEN 'other#1' END,
		       now() + u.lease_in * interval '1 second',
		       u.tx::text::xid8
		FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::text[], $5::int[], $6::int[], $7::bigint[])
		     AS u (id, topic, key, status, retry_in, lease_in, tx)`,
		ids, topics, keys, statuses, retryIn, leaseIn, txs)
	return ids
}

// randomBacklog is n rows over keys, most of the first key, each of one of
// two topics, in random states (a fifth not pending and due), several
// rows to a transaction, in random order, a few above the horizon.
func randomBacklog(rng *rand.Rand, keys []string, n int) []backlogRow {
	rows := make([]backlogRow, n)
	for i := range rows {
		r := &rows[i]
		r.key = keys[0]
		if rng.IntN(2) == 0 {
			r.key = keys[rng.IntN(len(keys))]
		}
		r.topic = []string{"orders", "payments"}[rng.IntN(2)]
		r.age = 1 + int64(rng.IntN(n))
		if rng.IntN(20) == 0 {
			r.age = -int64(i)
		}
		switch x := rng.IntN(100); {
		case x < 70:
			r.state = "pending"
		case x < 80:
			r.state = "retrying"
		case x < 87:
			r.state = "inFlight"
		case x < 94:
			r.state = "lapsed"
		default:
			r.state = "sent"
		}
	}
	return rows
}

// A claim of 500 rows from a shard with a backlog of 50,000 events over
// four keys reads about 500 rows (the shard's 500 oldest, every one
// ready, and at most the first of every bucket), where a read of the
// whole backlog reads all 50,000;
// when that first read is too short to decide (here: a window of one
// row), the passes bucket by bucket read about 5,700 (the window of every
// bucket, then 4,096 of the buckets that hold the keys). Doubling the backlog changes
// nothing of what the claim reads, while a full read reads twice as
// much. It counts what the claim reads; it does not time it.
func TestOrderedClaimReadIsBounded(t *testing.T) {
	t.Parallel()
	b := newClaimBundle(t)
	const backlog, limit = 50000, 500
	var keys []string
	for _, bucket := range []int16{0, 16, 32, 48} {
		keys = append(keys, b.keysIn(bucket, 1)...)
	}
	// The windows relay.headWindow and relay.firstWindow give a claim of
	// 500 rows over 64 buckets, and a first read too short to decide.
	relay := claimWindows{head: limit + limit/4 + 16, first: 8 + (2*limit+63)/64, second: 4096}
	passes := claimWindows{head: 1, first: relay.first, second: 4096}
	// At most: the first pending row of each of the 64 buckets, then the
	// head window; or the first row of each bucket, one row, each bucket
	// up to the window and the last pass's rows.
	maxRows := map[claimWindows]float64{relay: float64(64 + relay.head), passes: float64(64 + 1 + 64*passes.first + passes.second)}
	measure := func() (claim map[claimWindows]readCost, full readCost) {
		t.Helper()
		b.exec(`INSERT INTO {{table}} (topic, key, payload)
			SELECT 'orders', convert_to(($1::text[])[1 + g % 4], 'UTF8'), convert_to(repeat('x', 200), 'UTF8')
			FROM generate_series(0, $2 - 1) AS g`, keys, backlog)
		b.exec("ANALYZE {{table}}")
		testdb.AwaitReady(t, b.pool, b.table)
		full = b.explainFull(limit)
		claim = map[claimWindows]readCost{}
		for _, w := range []claimWindows{relay, passes} {
			got, e := claimExplained(t, b.all, 0, claimLessee, limit, w)
			c := costOf(e.plans...)
			c.out = float64(len(got.Rows))
			t.Logf("backlog %d, windows %+v: the claim read %.0f rows, %d buffers (%d in all); a full read %.0f rows, %d buffers (%d in all)",
				b.count("true"), w, c.rows, c.buffers, c.total, full.rows, full.buffers, full.total)
			if c.out != limit || full.out != limit {
				t.Fatalf("windows %+v: claimed %.0f rows, a full read picks %.0f; want %d", w, c.out, full.out, limit)
			}
			if c.rows > maxRows[w] {
				t.Errorf("windows %+v: the claim read %.0f rows, want at most %.0f (a full read: %.0f)", w, c.rows, maxRows[w], full.rows)
			}
			claim[w] = c
		}
		return claim, full
	}

	claim, full := measure()
	if full.rows < backlog {
		t.Errorf("a full read read %.0f rows, want the whole backlog (%d): the reference is not what it claims", full.rows, backlog)
	}
	if claim[passes].rows <= claim[relay].rows {
		t.Errorf("with a one-row head window the claim read %.0f rows, with the relay's %.0f: the passes did not run", claim[passes].rows, claim[relay].rows)
	}

	claim2, full2 := measure()
	for w, c := range claim {
		if claim2[w].rows != c.rows {
			t.Errorf("windows %+v: with twice the backlog the claim read %.0f rows, want the same %.0f", w, claim2[w].rows, c.rows)
		}
		// The same rows, through index probes one level deeper at most.
		if claim2[w].buffers*2 > c.buffers*3 {
			t.Errorf("windows %+v: with twice the backlog the claim read %d buffers, want about the same as %d", w, claim2[w].buffers, c.buffers)
		}
	}
	if full2.rows < 2*backlog || full2.buffers < full.buffers*3/2 {
		t.Errorf("with twice the backlog a full read read %.0f rows, %d buffers, want twice %.0f rows, %d buffers",
			full2.rows, full2.buffers, full.rows, full.buffers)
	}
}

// readCost is what statements read, from their EXPLAIN (ANALYZE, BUFFERS).
type readCost struct {
	rows    float64 // rows the scans of the outbox table returned or filtered out
	buffers int     // shared buffers those scans hit or read
	total   int     // shared buffers the statements hit or read
	out     float64 // rows claimed
}

// costOf adds up what the scans of the outbox table (or its partitions)
// read to pick the rows in plans: all but the primary-key look-ups of the
// rows taken, which every claim does, one per row it claims.
func costOf(plans ...testdb.Plan) readCost {
	var c readCost
	var walk func(n testdb.Plan)
	walk = func(n testdb.Plan) {
		switch n.Type {
		case "Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan":
			if n.Relation != "" && !strings.HasSuffix(n.Relation, "_shard_ranges") && !strings.HasSuffix(n.IndexName, "_pkey") {
				c.rows += (n.Rows + n.Removed) * float64(n.Loops)
				c.buffers += n.SharedHit + n.SharedRead
			}
		}
		for _, p := range n.Plans {
			walk(p)
		}
	}
	for _, p := range plans {
		c.total += p.SharedHit + p.SharedRead
		walk(p)
	}
	return c
}

// explainFull returns what fullClaimSQL reads to pick limit rows.
func (b *claimBundle) explainFull(limit int) readCost {
	b.t.Helper()
	p := testdb.ExplainBuffers(b.t, b.pool, b.sql(fullClaimSQL), limit, shardZero(), true, []string{})
	c := costOf(p)
	c.out = p.Rows
	return c
}

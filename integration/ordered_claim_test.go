package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Tests of what the ordered claim (relay/sql/postgres/claim_ordered.sql)
// reads: the rows a read of the shard's whole backlog would take, through
// a read that does not grow with the backlog, and past a key that blocks
// its bucket. They run the statement from its file against shard 0 of 16.

const (
	claimShards = 16
	claimLessee = "lessee#1"
	// claimBytes is the claims' byte bounds ($11, $12): no bound on rows
	// of these tests' sizes.
	claimBytes = 1 << 30
)

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

// shardZero lists the buckets of shard 0 of claimShards: 0 to 63.
func shardZero() []int16 {
	var b []int16
	for x := 0; x < 1024/claimShards; x++ {
		b = append(b, int16(x))
	}
	return b
}

// relaySQL is the relay's statement name (relay/sql/postgres/<name>.sql)
// for the test's table, read from its file.
func (b *bundle) relaySQL(name string) string {
	b.t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "relay", "sql", "postgres", name+".sql"))
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.NewReplacer("{{table}}", b.table.Ident(), "{{shards}}", b.table.Related("shard_ranges")).Replace(string(raw))
}

// claimSQL is the relay's ordered claim for the test's table.
func (b *bundle) claimSQL() string { return b.relaySQL("claim_ordered") }

// headClaimSQL is the claim the relay runs first: claimSQL without its
// bucket passes, cut as relay's headOnly cuts them, which keeps $10 typed.
func (b *bundle) headClaimSQL() string {
	b.t.Helper()
	q := b.claimSQL()
	i, j := strings.Index(q, "-- {{bucket passes}}"), strings.Index(q, "-- {{end of bucket passes}}")
	if i < 0 || j < i {
		b.t.Fatal("claim_ordered.sql has no bucket passes' marks")
	}
	return q[:i] + "bucket_runs AS (SELECT NULL::uuid AS id, NULL::tid AS ctid, NULL::xid8 AS tx WHERE $10::bigint IS NULL AND false),\n" + q[j+len("-- {{end of bucket passes}}"):]
}

// leaseShardZero creates the shard rows, with shard 0 leased to
// claimLessee for an hour.
func (b *bundle) leaseShardZero() {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, `INSERT INTO `+b.table.Related("shard_ranges")+` (shard, locked_by, locked_until)
		SELECT s, CASE WHEN s = 0 THEN $2 END, CASE WHEN s = 0 THEN now() + interval '1 hour' ELSE '-infinity' END
		FROM generate_series(0, $1 - 1) AS s`, claimShards, claimLessee)
	if err != nil {
		b.t.Fatalf("create shards: %v", err)
	}
}

// keysIn returns n keys of bucket, in a fixed order.
func (b *bundle) keysIn(bucket int16, n int) []string {
	b.t.Helper()
	rows, err := b.pool.Query(b.ctx, `
		SELECT k
		FROM (SELECT 'key-' || g AS k FROM generate_series(1, 200000) AS g) AS c
		WHERE (hashtextextended(encode(convert_to(k, 'UTF8'), 'hex'), 0) & 1023) = $1
		LIMIT $2`, bucket, n)
	if err != nil {
		b.t.Fatalf("keys of bucket %d: %v", bucket, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) != n {
		b.t.Fatalf("keys of bucket %d: %v, %v", bucket, keys, err)
	}
	return keys
}

// fatalIn ends the test after rolling tx back: a transaction left open
// holds its connection, and the pool's cleanup would wait for it forever.
func (b *bundle) fatalIn(tx pgx.Tx, format string, args ...any) {
	b.t.Helper()
	_ = tx.Rollback(b.ctx)
	b.t.Fatalf(format, args...)
}

// claimWindows are how many rows the ordered claim reads first: head of
// the shard's oldest pending rows, then window of each bucket, then
// second in all in its last pass (0: the relay's least, 4,096).
type claimWindows struct{ head, window, second int }

// secondWindow is w.second, or the relay's least for 0.
func (w claimWindows) secondWindow() int {
	if w.second == 0 {
		return 4096
	}
	return w.second
}

// claimIn runs in tx the ordered claim of up to limit rows of shard 0, of
// every topic or of topics, with the windows w, and returns the claimed
// ids.
func (b *bundle) claimIn(tx pgx.Tx, claimSQL string, limit int, w claimWindows, topics []string) []uuid.UUID {
	b.t.Helper()
	rows, err := tx.Query(b.ctx, claimSQL, limit, "claim#1", 60000, 0, claimLessee, shardZero(), topics == nil, topics, w.head, w.window, claimBytes, claimBytes, w.secondWindow())
	if err != nil {
		b.fatalIn(tx, "claim: %v", err)
	}
	return b.claimedIDs(tx, rows)
}

// claimedIDs collects the ids of the rows an ordered claim in tx returned.
func (b *bundle) claimedIDs(tx pgx.Tx, rows pgx.Rows) []uuid.UUID {
	b.t.Helper()
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (uuid.UUID, error) {
		var id uuid.UUID
		var skip any
		err := r.Scan(&id, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip)
		return id, err
	})
	if err != nil {
		b.fatalIn(tx, "claim: %v", err)
	}
	return ids
}

// headClaimIn runs in tx the claim's first pass alone (headClaimSQL) with
// a head window of head rows, and returns the claimed ids.
func (b *bundle) headClaimIn(tx pgx.Tx, headSQL string, limit, head int, topics []string) []uuid.UUID {
	b.t.Helper()
	rows, err := tx.Query(b.ctx, headSQL, limit, "claim#1", 60000, 0, claimLessee, shardZero(), topics == nil, topics, head, 0, claimBytes, claimBytes)
	if err != nil {
		b.fatalIn(tx, "first pass: %v", err)
	}
	return b.claimedIDs(tx, rows)
}

// fullClaimIn returns the ids fullClaimSQL picks in tx.
func (b *bundle) fullClaimIn(tx pgx.Tx, limit int, topics []string) []uuid.UUID {
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

// The bounded claim takes exactly the rows a read of the whole backlog
// takes, whatever the window: random tables of a few keys sharing buckets,
// with heads waiting for their retry, claims in flight and lapsed, rows
// above the visibility horizon and rows of another shard, claimed with
// windows from one row to the whole claim. Both run in one repeatable-read
// transaction, so that they see the same snapshot and the same now(), and
// the claim is rolled back.
func TestOrderedClaimTakesTheRowsAFullReadTakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.leaseShardZero()
	claimSQL, headSQL := b.claimSQL(), b.headClaimSQL()
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
					windows = append(windows, claimWindows{head: head, window: window})
				}
			}
			windows = append(windows, claimWindows{head: limit + limit/4 + 16, window: limit})
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
				got := b.claimIn(tx, claimSQL, limit, w, topics)
				head := b.headClaimIn(tx, headSQL, limit, w.head, topics)
				if err := tx.Rollback(b.ctx); err != nil {
					t.Fatal(err)
				}
				slices.SortFunc(want, compareUUID)
				slices.SortFunc(got, compareUUID)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d, limit %d, windows %+v, topics %v: claimed %d rows %v, a full read takes %d rows %v",
						round, limit, w, topics, len(got), got, len(want), want)
				}
				// The first pass alone takes the same rows, or nothing (and the
				// relay runs the whole claim).
				slices.SortFunc(head, compareUUID)
				switch {
				case len(head) == 0:
					headLeft++
				case slices.Equal(head, want):
					headTook++
				default:
					t.Fatalf("round %d, limit %d, head window %d, topics %v: the first pass alone claimed %d rows %v, a full read takes %d rows %v",
						round, limit, w.head, topics, len(head), head, len(want), want)
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
	b := setup(t)
	b.leaseShardZero()
	claimSQL := b.claimSQL()
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
		name: "a lapsed claim past the head cut", limit: 2, windows: claimWindows{head: 2, window: 1},
		rows: []backlogRow{
			{key: k, state: "retrying", age: 100}, {key: j, state: "pending", age: 95},
			{key: j, state: "pending", age: 85}, {key: l, state: "lapsed", age: 80},
		},
		want: []int{1, 2},
	}, {
		// K's head waits, and its rows fill the first read; the passes
		// reach M's.
		name: "a blocked key fills the head", limit: 2, windows: claimWindows{head: 3, window: 4},
		rows: []backlogRow{
			{key: k, state: "retrying", age: 100}, {key: k, state: "pending", age: 99}, {key: k, state: "pending", age: 98},
			{key: m, state: "pending", age: 97}, {key: m, state: "pending", age: 96},
		},
		want: []int{3, 4},
	}, {
		// The first read reaches the end of the shard: it decides with
		// fewer rows than the claim, and counts the lapsed claim L:0,
		// which no pending row comes after.
		name: "the head reaches the end", limit: 5, windows: claimWindows{head: 4, window: 1},
		rows: []backlogRow{
			{key: k, state: "retrying", age: 100}, {key: k, state: "pending", age: 99},
			{key: j, state: "pending", age: 95}, {key: l, state: "lapsed", age: 120},
		},
		want: []int{2, 3},
	}, {
		// The first pass reads K:0 of K's bucket: the lapsed claim K:2
		// beyond it must not count as claimable (K:1 waits), or the pick
		// looks full and J:1 is left out.
		name: "a lapsed claim past the first cut", limit: 3, windows: claimWindows{head: 1, window: 1},
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
		name: "a lapsed claim past the second cut", limit: 3, windows: claimWindows{head: 1, window: 1},
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
		name: "a blocked key fills both passes", limit: 2, windows: claimWindows{head: 1, window: 1},
		rows: []backlogRow{
			{key: k, state: "retrying", age: 100}, {key: k, state: "pending", age: 99},
			{key: k, state: "pending", age: 98}, {key: k, state: "pending", age: 97},
			{key: m, state: "pending", age: 96}, {key: m, state: "pending", age: 95}, {key: m, state: "pending", age: 94},
		},
		want: []int{4, 5},
	}, {
		// K's in-flight claim holds K back; rows above the horizon are
		// not read, and hold nothing back below it.
		name: "in flight and above the horizon", limit: 5, windows: claimWindows{head: 1, window: 1},
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
			got := b.claimIn(tx, claimSQL, c.limit, c.windows, nil)
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

func compareUUID(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) }

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
func (b *bundle) writeBacklog(rows []backlogRow) []uuid.UUID {
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

// readCost is what one statement read, from its EXPLAIN (ANALYZE,
// BUFFERS, FORMAT JSON).
type readCost struct {
	rows    float64 // rows the scans of the outbox table returned or filtered out
	buffers int64   // shared buffers those scans hit or read
	total   int64   // shared buffers the whole statement hit or read
	out     float64 // rows the statement returned
}

// explain runs q with args under EXPLAIN (ANALYZE, BUFFERS) in a
// transaction that it rolls back, and adds up what the scans of the
// outbox table (or its partitions) read to pick the rows: all but the
// primary-key look-ups of the picked rows, which every claim does, one
// per row it claims.
func (b *bundle) explain(q string, args ...any) readCost {
	b.t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // only undoes the claim
	// As relay.ConfigurePool plans the relay's statements.
	if _, err := tx.Exec(b.ctx, "SET LOCAL enable_bitmapscan = off"); err != nil {
		b.t.Fatal(err)
	}
	var out []byte
	if err := tx.QueryRow(b.ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q, args...).Scan(&out); err != nil {
		b.t.Fatalf("explain: %v", err)
	}
	type node struct {
		Type     string  `json:"Node Type"`
		Relation string  `json:"Relation Name"`
		Index    string  `json:"Index Name"`
		Rows     float64 `json:"Actual Rows"`
		Loops    float64 `json:"Actual Loops"`
		Removed  float64 `json:"Rows Removed by Filter"`
		Hit      int64   `json:"Shared Hit Blocks"`
		Read     int64   `json:"Shared Read Blocks"`
		Plans    []node  `json:"Plans"`
	}
	var plans []struct {
		Plan node `json:"Plan"`
	}
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		b.t.Fatalf("explain output %s: %v", out, err)
	}
	top := plans[0].Plan
	c := readCost{total: top.Hit + top.Read, out: top.Rows}
	var walk func(n node)
	walk = func(n node) {
		switch n.Type {
		case "Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan":
			// Scans are leaves: their buffers are their own.
			if n.Relation != "" && !strings.HasSuffix(n.Relation, "_shard_ranges") && !strings.HasSuffix(n.Index, "_pkey") {
				c.rows += (n.Rows + n.Removed) * n.Loops
				c.buffers += n.Hit + n.Read
			}
		}
		for _, p := range n.Plans {
			walk(p)
		}
	}
	walk(top)
	return c
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
	b := setup(t)
	b.leaseShardZero()
	const backlog, limit = 50000, 500
	var keys []string
	for _, bucket := range []int16{0, 16, 32, 48} {
		keys = append(keys, b.keysIn(bucket, 1)...)
	}
	// The windows relay.headWindow and relay.firstWindow give a claim of
	// 500 rows over 64 buckets, and a first read too short to decide.
	relay := claimWindows{head: limit + limit/4 + 16, window: 8 + (2*limit+63)/64}
	passes := claimWindows{head: 1, window: relay.window}
	// At most: the first pending row of each of the 64 buckets, then the
	// head window; or the first row of each bucket, one row, each bucket
	// up to the window and the last pass's rows.
	maxRows := map[claimWindows]float64{relay: float64(64 + relay.head), passes: float64(64 + 1 + 64*passes.window + passes.secondWindow())}
	measure := func() (claim map[claimWindows]readCost, full readCost) {
		t.Helper()
		b.exec(`INSERT INTO {{table}} (topic, key, payload)
			SELECT 'orders', convert_to(($1::text[])[1 + g % 4], 'UTF8'), convert_to(repeat('x', 200), 'UTF8')
			FROM generate_series(0, $2 - 1) AS g`, keys, backlog)
		b.exec("ANALYZE {{table}}")
		await(t, 10*time.Second, func() bool {
			return b.count("tx >= pg_snapshot_xmin(pg_current_snapshot())") == 0
		}, "the backlog's transaction is not below the visibility horizon")
		full = b.explain(b.sql(fullClaimSQL), limit, shardZero(), true, []string{})
		claim = map[claimWindows]readCost{}
		for _, w := range []claimWindows{relay, passes} {
			c := b.explain(b.claimSQL(), limit, "claim#1", 60000, 0, claimLessee, shardZero(), true, []string{}, w.head, w.window, claimBytes, claimBytes, w.secondWindow())
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

// A key whose head waits for its retry, with more rows behind it than the
// claim reads of a bucket, does not starve a key of the same bucket
// written after it: the relay delivers that key's events, in order, and
// none of the blocked key's.
func TestOrderedClaimReadsPastABlockedKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pair := b.keysIn(0, 2)
	blocked, other := pair[0], pair[1]
	// More than the 10 and then 50 rows of the bucket that a claim of 50
	// (orderedConfig) reads in its first two passes.
	msgs := make([]outbox.Message, 300)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", Key: []byte(blocked), Payload: fmt.Appendf(nil, "%s:%d", blocked, i)}
	}
	head := b.write(msgs...)[0]
	b.exec(`UPDATE {{table}} SET attempt = 1, next_retry_at = now() + interval '1 hour' WHERE id = $1`, head)
	for i := range 5 {
		b.write(outbox.Message{Topic: "orders", Key: []byte(other), Payload: fmt.Appendf(nil, "%s:%d", other, i)})
	}

	s := &orderSink{}
	b.startRelay(s, orderedConfig(claimShards))
	await(t, 10*time.Second, func() bool { return b.count("status = 'sent'") == 5 }, "the later key was not delivered: %v", b.statuses())
	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprintf("%s:%d", other, i))
	}
	if got := s.delivered(); !slices.Equal(got, want) {
		t.Errorf("delivered %v, want %v", got, want)
	}
	if n := b.count("key = $1 AND status <> 'pending'", []byte(blocked)); n != 0 {
		t.Errorf("%d events of the blocked key were claimed, want none", n)
	}
}

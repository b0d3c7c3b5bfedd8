package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Tests of the ordered claim's statements run from their files against
// shard 0 of 16, and of the relay reading past a key that blocks its
// bucket. What the claim's steps pick (the rows a read of the shard's
// whole backlog would take, through reads that do not grow with the
// backlog) is tested in relay (ordered_claim_read_test.go).

const (
	claimShards = 16
	claimLessee = "lessee#1"
	// claimBytes is the claims' byte bounds: no bound on rows of these
	// tests' sizes.
	claimBytes = 1 << 30
)

// shardZero lists the buckets of shard 0 of claimShards: 0 to 63.
func shardZero() []int16 {
	var b []int16
	for x := 0; x < 1024/claimShards; x++ {
		b = append(b, int16(x))
	}
	return b
}

// relaySQL is the relay's statement name (relay/internal/pgstore/sql/<name>.sql)
// for the test's table, read from its file.
func (b *bundle) relaySQL(name string) string {
	b.t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "relay", "internal", "pgstore", "sql", name+".sql"))
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.NewReplacer("{{table}}", b.table.Ident(), "{{shards}}", b.table.Related("shard_ranges")).Replace(string(raw))
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
func (b *bundle) keysIn(bucket int16, n int) []string { return testdb.KeysIn(b.t, b.pool, bucket, n) }

// fatalIn ends the test after rolling tx back: a transaction left open
// holds its connection, and the pool's cleanup would wait for it forever.
func (b *bundle) fatalIn(tx pgx.Tx, format string, args ...any) {
	b.t.Helper()
	_ = tx.Rollback(b.ctx)
	b.t.Fatalf(format, args...)
}

// querier runs a query: a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// claimQuery claims on db, as claimLessee, up to limit rows of shard 0
// with the claim's first read (relay/internal/pgstore/sql/ordered_head.sql) and
// its last step (ordered_take.sql): the rows read up to the first that is
// not ready, which is what the relay's steps between them pick when every
// key's rows are ready (those steps are relay's tests'). Its rows are
// those the take returns.
func (b *bundle) claimQuery(db querier, limit int) (pgx.Rows, error) {
	b.t.Helper()
	var seen, floor *int64
	var ids [][16]byte
	var tids []pgtype.TID
	rows, err := db.Query(b.ctx, b.relaySQL("ordered_head"), pgx.NamedArgs{"shard": 0, "first_bucket": 0, "last_bucket": 1024/claimShards - 1,
		"all_topics": true, "topics": []string{}, "window": limit})
	if err != nil {
		return nil, err
	}
	var id *[16]byte
	var ready, inFlight *bool
	var tid pgtype.TID
	var skip any
	stop := false
	_, err = pgx.ForEachRow(rows, []any{&skip, &id, &skip, &skip, &skip, &ready, &inFlight, &tid, &seen, &floor}, func() error {
		if id == nil || *inFlight {
			return nil
		}
		stop = stop || !*ready
		if !stop {
			ids, tids = append(ids, *id), append(tids, tid)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	lo, hi := [16]byte{}, [16]byte{}
	if len(ids) > 0 {
		lo, hi = slices.MinFunc(ids, bytesCompare), slices.MaxFunc(ids, bytesCompare)
	}
	return db.Query(b.ctx, b.relaySQL("ordered_take"), pgx.NamedArgs{"shard": 0, "lessee": claimLessee, "owner": "claim#1",
		"lease_ms": 60000, "ids": ids, "tids": tids, "by_tid": !testdb.Partitioned(), "revive": [][16]byte{}, "lo": lo, "hi": hi, "seen": seen, "floor": floor,
		"batch_bytes": claimBytes, "event_bytes": claimBytes})
}

func bytesCompare(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) }

func compareUUID(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) }

// claimedIDs collects the ids of the rows an ordered claim in tx returned.
func (b *bundle) claimedIDs(tx pgx.Tx, rows pgx.Rows) []uuid.UUID {
	b.t.Helper()
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (uuid.UUID, error) {
		var id uuid.UUID
		var skip any
		err := r.Scan(&id, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip)
		return id, err
	})
	if err != nil {
		b.fatalIn(tx, "claim: %v", err)
	}
	return ids
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

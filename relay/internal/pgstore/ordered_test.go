package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Every bucket belongs to exactly one shard, for every shard count: the
// shard bucket * shards / Buckets names, and the shards' ranges cover the
// buckets in order with no gap or overlap.
func TestBucketsOfCoverEveryBucketOnce(t *testing.T) {
	for shards := 1; shards <= Buckets; shards++ {
		next := 0
		for shard := range shards {
			b := bucketsOf(shard, shards)
			if len(b) == 0 {
				t.Fatalf("%d shards: shard %d has no bucket", shards, shard)
			}
			for _, x := range b {
				if int(x) != next {
					t.Fatalf("%d shards: shard %d holds bucket %d, want %d next", shards, shard, x, next)
				}
				if got := int(x) * shards / Buckets; got != shard {
					t.Fatalf("%d shards: bucket %d is in the range of shard %d, but maps to %d", shards, x, shard, got)
				}
				next++
			}
		}
		if next != Buckets {
			t.Fatalf("%d shards: the ranges end at bucket %d, want %d", shards, next, Buckets)
		}
	}
}

func TestHeadWindowHoldsTheClaim(t *testing.T) {
	for _, limit := range []int{1, 10, 500, 10000} {
		if w := headWindow(limit); w <= limit {
			t.Errorf("headWindow(%d) = %d, want more than the claim", limit, w)
		}
	}
}

// The claim's first read decides it whether or not a row is ready: when
// every row it reads is ready, it takes the oldest of them, the shard's
// oldest rows (prefix); when a key's head waits for its retry, it leaves
// that key's rows behind. Either way it runs two statements, the read and
// the take, and no read bucket by bucket.
func TestOrderedClaimDecidesOnItsFirstRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, s := orderedStore(t, 1, 40, 4)
	shard, ok, err := s.LeaseShard(ctx, "lessee")
	if err != nil || !ok {
		t.Fatalf("leaseShard = %v, %v", ok, err)
	}
	claim := func() (claimed int, prefix bool, statements int) {
		t.Helper()
		c, e := claimExplained(t, s, shard, "lessee", 20, windowsFor(20, Buckets))
		return len(c.Rows), c.Prefix, len(e.plans)
	}
	if n, prefix, st := claim(); n != 20 || !prefix || st != 2 {
		t.Errorf("every row ready: claimed %d rows, prefix %v, in %d statements; want 20, true, 2", n, prefix, st)
	}
	// Key k0's head waits for its retry: its 10 rows stay, the others'
	// 30 are claimable.
	if _, err := pool.Exec(ctx, "UPDATE "+table.Ident()+" SET next_retry_at = now() + interval '1 hour' WHERE id = (SELECT id FROM "+table.Ident()+" WHERE key = 'k0' ORDER BY tx, id LIMIT 1)"); err != nil {
		t.Fatal(err)
	}
	if n, prefix, st := claim(); n != 20 || prefix || st != 2 {
		t.Errorf("a head waiting: claimed %d rows, prefix %v, in %d statements; want 20, false, 2", n, prefix, st)
	}
}

// The take fetches the rows at the tuple ids the read saw, and keeps a
// row only if its id is still there: a row updated since the read (relay
// failed retry, relay replay) has moved and cuts the claim, so that its
// key's later rows do not go before it; a tuple id that holds another row
// takes nothing.
func TestOrderedTakeCutsAtARowMovedSinceTheRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, s := orderedStore(t, 1, 10, 1)
	shard, ok, err := s.LeaseShard(ctx, "lessee")
	if err != nil || !ok {
		t.Fatalf("leaseShard = %v, %v", ok, err)
	}
	rows, err := pool.Query(ctx, "SELECT bucket, id, topic, key, (tx::text)::bigint, ctid FROM "+table.Ident()+" ORDER BY tx, id")
	if err != nil {
		t.Fatal(err)
	}
	var read []readRow
	var x readRow
	if _, err := pgx.ForEachRow(rows, []any{&x.bucket, &x.id, &x.topic, &x.key, &x.tx, &x.tid}, func() error {
		x.ready = true
		read = append(read, x)
		return nil
	}); err != nil || len(read) != 10 {
		t.Fatalf("read %d rows (%v), want 10", len(read), err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+table.Ident()+" SET next_retry_at = next_retry_at WHERE id = $1", read[3].id); err != nil {
		t.Fatal(err)
	}
	took, err := s.take(ctx, pool, "owner", shard, "lessee", read, nil, nil)
	if err != nil || len(took) != 3 {
		t.Fatalf("take after the 4th row moved = %d rows (%v), want the 3 before it", len(took), err)
	}
	wrong := slices.Clone(read[4:])
	wrong[0].tid = read[5].tid
	if took, err := s.take(ctx, pool, "owner", shard, "lessee", wrong, nil, nil); err != nil || len(took) != 0 {
		t.Errorf("take of a row at another row's tuple id = %d rows (%v), want none", len(took), err)
	}
}

// The ordered write-back finds retried and failed rows by their ids, never
// by reading the claim's id range or the table: with statistics that count
// few pending rows, the planner estimated the range at one row and read
// it (4,056 rows, for empty lists, in a benchmark on 1,000,000 rows), or
// read the whole table for 250 retried rows (record_ordered_retried.sql).
// An outcome of sent rows alone runs record_ordered.sql alone.
func TestOrderedWriteBackLooksUpRetriedRowsByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const shards = 16
	pool, table, s := orderedStore(t, shards, 500*shards, 1000)
	// Only shard 0 has work, and the statistics count no pending row: a
	// claim of shard 0 spans the ids of every shard's rows.
	for _, q := range []string{
		"UPDATE " + table.Ident() + " SET status = 'sent', sent_at = now()",
		"ANALYZE " + table.Ident(),
		fmt.Sprintf("UPDATE %s SET status = 'pending', sent_at = NULL WHERE bucket * %d / 1024 = 0", table.Ident(), shards),
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	shard, ok, err := s.LeaseShard(ctx, "lessee")
	if err != nil || !ok || shard != 0 {
		t.Fatalf("leaseShard = %d, %v, %v; want shard 0", shard, ok, err)
	}
	claimed, _, err := s.ClaimOrdered(ctx, "owner", 500, shard, "lessee", nil)
	rows := claimed.Rows
	if err != nil || len(rows) < 100 {
		t.Fatalf("claimOrdered = %d rows, %v; want the shard's few hundred", len(rows), err)
	}
	// The first half sent, the second retried or failed (a sink that went
	// down halfway).
	half := len(rows) / 2
	var sent []uuid.UUID
	var retries []store.Retry
	var failures []store.Failure
	for i, x := range rows {
		switch {
		case i < half:
			sent = append(sent, x.ID)
		default:
			retries = append(retries, store.Retry{ID: x.ID, Delay: time.Second, Error: "later"})
			failures = append(failures, store.Failure{ID: x.ID, Error: "bad"})
		}
	}
	// explain returns the plan lines of the write-back's statements.
	explain := func(out store.Outcome) (lines []string, statements int) {
		t.Helper()
		b := &pgx.Batch{}
		s.queueRecord(b, &store.OrderedWrite{Shard: shard, Lessee: "lessee", Owner: "owner", Out: out, TIDs: store.TIDsOf(rows)}, &store.Recorded{})
		for _, q := range b.QueuedQueries {
			lines = append(lines, explainAnalyzed(t, pool, q.SQL, q.Arguments...)...)
		}
		return lines, len(b.QueuedQueries)
	}
	// read returns the most rows one scan of the table read, and whether
	// one read it whole.
	read := func(lines []string) (most int, whole bool) {
		for _, l := range lines {
			switch {
			case strings.Contains(l, "Seq Scan on outbox "):
				whole = true
			case strings.Contains(l, "Scan using outbox_") && !strings.Contains(l, "never executed"):
				most = max(most, planCount(t, l, "rows="))
			}
		}
		return most, whole
	}
	for _, c := range []struct {
		name string
		out  store.Outcome
	}{
		{"retried", store.Outcome{Sent: sent, Retries: retries}},
		{"failed", store.Outcome{Sent: sent, Failures: failures}},
	} {
		lines, _ := explain(c.out)
		if most, whole := read(lines); whole || most > len(rows)-half {
			t.Errorf("%s: a scan read %d rows, the table whole: %v:\n%s\nwant at most the %d rows named",
				c.name, most, whole, strings.Join(lines, "\n"), len(rows)-half)
		}
	}
	// Sent rows alone: record_ordered.sql without
	// record_ordered_retried.sql.
	lines, statements := explain(store.Outcome{Sent: sent})
	if n := strings.Count(strings.Join(lines, "\n"), "Update on"); n != 3 || statements != 1 {
		t.Errorf("the write-back of sent rows alone updates %d times:\n%s\nwant 3 (shard row, sent rows by tuple id, moved rows)", n, strings.Join(lines, "\n"))
	}
}

// The write-back of a claim of the shard's oldest rows, every one sent,
// raises the shard's floor to the last row's transaction, and the next
// claim still takes the rest of that transaction's rows. A claim with a
// row retried, a claim that left a waiting key's rows behind, a claim
// with some topics unordered, and a floor cleared since the claim (relay
// replay) leave the floor as it was.
func TestOrderedWriteBackRaisesTheFloorPastTheRowsSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, s := orderedStore(t, 1, 10, 4) // transaction 1: 10 rows
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	write := func(n int) {
		t.Helper()
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: "orders", Key: fmt.Appendf(nil, "k%d", i%4), Payload: []byte("x")}
		}
		if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
			t.Fatal(err)
		}
		testdb.AwaitReady(t, pool, table)
	}
	write(10) // transaction 2
	write(10) // transaction 3
	shard, ok, err := s.LeaseShard(ctx, "lessee")
	if err != nil || !ok {
		t.Fatalf("leaseShard = %v, %v", ok, err)
	}
	floor := func() *int64 {
		t.Helper()
		var f *int64
		if err := pool.QueryRow(ctx, "SELECT floor_tx::text::bigint FROM "+table.Related("shard_ranges")+" WHERE shard = $1", shard).Scan(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	claim := func(s *Store, limit int) store.OrderedClaim {
		t.Helper()
		c, _, err := s.ClaimOrdered(ctx, "owner", limit, shard, "lessee", nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	record := func(c store.OrderedClaim, out store.Outcome) {
		t.Helper()
		got, err := s.RecordOrdered(ctx, store.OrderedWrite{Shard: shard, Lessee: "lessee", Owner: "owner", Out: out, TIDs: store.TIDsOf(c.Rows), Raise: c.Raise(len(out.Sent))})
		if err != nil || got.Sent != len(out.Sent) || got.Retried != len(out.Retries) {
			t.Fatalf("recordOrdered = %+v, %v; want %d sent, %d retried", got, err, len(out.Sent), len(out.Retries))
		}
	}
	allSent := func(c store.OrderedClaim) store.Outcome {
		var out store.Outcome
		for _, x := range c.Rows {
			out.Sent = append(out.Sent, x.ID)
		}
		return out
	}

	// The 10 rows of transaction 1 and 5 of transaction 2, all sent.
	c := claim(s, 15)
	if len(c.Rows) != 15 || !c.Prefix {
		t.Fatalf("first claim: %d rows, prefix %v; want 15, true", len(c.Rows), c.Prefix)
	}
	tx2 := c.Rows[14].Tx
	record(c, allSent(c))
	if f := floor(); f == nil || *f != tx2 {
		t.Fatalf("floor after the first claim's rows were sent = %v, want transaction 2 (%d)", f, tx2)
	}

	// The other 5 of transaction 2 and the 10 of transaction 3: the floor
	// at transaction 2 hides none of them. The last one is retried.
	c = claim(s, 15)
	if len(c.Rows) != 15 || c.Rows[0].Tx != tx2 || !c.Prefix {
		t.Fatalf("second claim: %d rows from transaction %d, prefix %v; want 15 from %d, true", len(c.Rows), c.Rows[0].Tx, c.Prefix, tx2)
	}
	last := c.Rows[14]
	out := allSent(c)
	out.Sent = out.Sent[:14]
	out.Retries = []store.Retry{{ID: last.ID, Error: "later"}}
	record(c, out)
	if f := floor(); f == nil || *f > last.Tx || *f != tx2 {
		t.Fatalf("floor after a claim with a row retried = %v, want it left at transaction 2 (%d), below the retried row's %d", f, tx2, last.Tx)
	}

	// The retried row alone, claimed again; relay replay clears the floor
	// before the write-back.
	c = claim(s, 15)
	if len(c.Rows) != 1 || c.Rows[0].ID != last.ID || !c.Prefix {
		t.Fatalf("third claim: %d rows, prefix %v; want the retried row, true", len(c.Rows), c.Prefix)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+table.Related("shard_ranges")+" SET floor_tx = NULL"); err != nil {
		t.Fatal(err)
	}
	record(c, allSent(c))
	if f := floor(); f != nil {
		t.Fatalf("floor cleared before the write-back = %d after it, want it left cleared", *f)
	}

	// A key whose head waits for its retry: the claim leaves its rows
	// behind and is no prefix.
	write(8)
	if _, err := pool.Exec(ctx, "UPDATE "+table.Ident()+" SET next_retry_at = now() + interval '1 hour' WHERE id = (SELECT id FROM "+table.Ident()+" WHERE status = 'pending' AND key = 'k0' ORDER BY tx, id LIMIT 1)"); err != nil {
		t.Fatal(err)
	}
	if c = claim(s, 15); len(c.Rows) != 6 || c.Prefix {
		t.Fatalf("claim past a waiting key: %d rows, prefix %v; want 6, false", len(c.Rows), c.Prefix)
	}
	if raise := c.Raise(len(allSent(c).Sent)); raise != nil {
		t.Fatalf("raise of a claim past a waiting key = %d, want none", *raise)
	}
	// Some topics unordered: rows of others may lie among the claim's.
	byTopic := New(pool, Config{Table: table, Lease: 30 * time.Second, Bounds: defaultBounds, Topics: []string{"orders"}, Shards: 1})
	if _, err := pool.Exec(ctx, "UPDATE "+table.Ident()+" SET next_retry_at = now() WHERE status = 'pending'"); err != nil {
		t.Fatal(err)
	}
	if c = claim(byTopic, 15); len(c.Rows) != 8 || c.Prefix {
		t.Fatalf("claim of ordered topics: %d rows, prefix %v; want 8, false", len(c.Rows), c.Prefix)
	}
}

// A lease takes the shard of a lapsed holder first, then the least
// recently served, skipping shards without work; it looks for work in
// that order and stops at the first shard that has some
// (lease_shard.sql).
func TestLeaseShardLooksInOrderAndStopsAtWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, s := orderedStore(t, 4, 200, 200)
	exec := func(q string) {
		t.Helper()
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	shards := table.Related("shard_ranges")
	// Shard 2's holder died; 0 was served last, 1 first, 3 in between.
	exec("UPDATE " + shards + " SET locked_by = 'dead', locked_until = now() - interval '5 seconds' WHERE shard = 2")
	exec("UPDATE " + shards + " SET locked_until = now() - interval '1 second' WHERE shard = 0")
	exec("UPDATE " + shards + " SET locked_until = now() - interval '3 seconds' WHERE shard = 1")
	exec("UPDATE " + shards + " SET locked_until = now() - interval '2 seconds' WHERE shard = 3")

	// Every shard has work: the lease looks at one shard only.
	all, topics := s.all, s.topics
	lines := explainAnalyzed(t, pool, s.q.leaseShard, pgx.NamedArgs{"lease_ms": 60000, "lessee": "probe", "shards": 4,
		"all_ordered": all, "ordered_topics": topics})
	// The look for a shard's pending rows (the first EXISTS) runs once.
	looked := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "SubPlan 1" && i+1 < len(lines) {
			looked = planCount(t, lines[i+1], "loops=")
		}
	}
	if looked != 1 {
		t.Errorf("lease with work in every shard looked at %d shards:\n%s\nwant 1", looked, strings.Join(lines, "\n"))
	}

	// Shard 1 has no work.
	exec("DELETE FROM " + table.Ident() + " WHERE bucket * 4 / 1024 = 1")
	var got []int
	for i := range 4 {
		shard, ok, err := s.LeaseShard(ctx, fmt.Sprintf("owner-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, shard)
	}
	if want := []int{2, 3, 0}; !slices.Equal(got, want) {
		t.Errorf("leases took shards %v, want %v", got, want)
	}
}

// A batch's write-back rides on the shard's next statement: the next
// claim writes it first, in its own transaction, and sees its rows sent;
// a claim that fails writes neither, and the hand-back writes what still
// waits, before it returns the shard.
func TestOrderedWriteBackRidesOnTheShardsNextStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, s := orderedStore(t, 1, 30, 3)
	shard, ok, err := s.LeaseShard(ctx, "lessee")
	if err != nil || !ok {
		t.Fatalf("leaseShard = %v, %v", ok, err)
	}
	status := func(rows []store.Row) map[string]int {
		t.Helper()
		ids := make([]uuid.UUID, len(rows))
		for i, x := range rows {
			ids[i] = x.ID
		}
		got := map[string]int{}
		q := "SELECT status, count(*) FROM " + table.Ident() + " WHERE id = ANY ($1) GROUP BY status"
		rs, err := pool.Query(ctx, q, pgIDs(ids))
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var s string
			var n int
			if err := rs.Scan(&s, &n); err != nil {
				t.Fatal(err)
			}
			got[s] = n
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	sent := func(c store.OrderedClaim) *store.OrderedWrite {
		var out store.Outcome
		for _, x := range c.Rows {
			out.Sent = append(out.Sent, x.ID)
		}
		return &store.OrderedWrite{Shard: shard, Lessee: "lessee", Owner: "owner", Out: out, TIDs: store.TIDsOf(c.Rows), Raise: c.Raise(len(out.Sent))}
	}

	first, got, err := s.ClaimOrdered(ctx, "owner", 10, shard, "lessee", nil)
	if err != nil || len(first.Rows) != 10 || got != (store.Recorded{}) {
		t.Fatalf("first claim = %d rows, %+v, %v; want 10 rows, nothing written", len(first.Rows), got, err)
	}
	second, got, err := s.ClaimOrdered(ctx, "owner", 10, shard, "lessee", sent(first))
	if err != nil || got.Sent != 10 {
		t.Fatalf("second claim = %+v, %v; want the first claim's 10 rows written sent", got, err)
	}
	// Without the write-back first, the claim would take the same rows
	// again: they were pending until it ran.
	if len(second.Rows) != 10 || second.Rows[0].ID == first.Rows[0].ID {
		t.Fatalf("second claim took %d rows, from %v; want the 10 after the first claim's (from %v)", len(second.Rows), second.Rows[0].ID, first.Rows[0].ID)
	}
	if s := status(first.Rows); s["sent"] != 10 {
		t.Fatalf("first claim's rows: %v; want 10 sent", s)
	}

	// A claim that fails (a limit the server refuses) writes nothing.
	if _, _, err := s.ClaimOrdered(ctx, "owner", -1, shard, "lessee", sent(second)); err == nil {
		t.Fatal("claim with limit -1 succeeded; want an error")
	}
	if s := status(second.Rows); s["pending"] != 10 {
		t.Fatalf("second claim's rows after a failed claim: %v; want 10 pending", s)
	}
	got, err = s.HandBack(ctx, shard, "lessee", sent(second))
	if err != nil || got.Sent != 10 {
		t.Fatalf("handBack = %+v, %v; want the second claim's 10 rows written sent", got, err)
	}
	if s := status(second.Rows); s["sent"] != 10 {
		t.Fatalf("second claim's rows after the hand-back: %v; want 10 sent", s)
	}
	var held bool
	if err := pool.QueryRow(ctx, "SELECT locked_by IS NOT NULL FROM "+table.Related("shard_ranges")+" WHERE shard = $1", shard).Scan(&held); err != nil || held {
		t.Fatalf("shard held after the hand-back: %v, %v", held, err)
	}
}

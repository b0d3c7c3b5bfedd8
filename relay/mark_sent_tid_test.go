package relay

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// claimedPlain returns a relay on a new unpartitioned table of n pending
// rows, which it has claimed for "tid#1", and the claimed rows and ids.
func claimedPlain(t *testing.T, n int) (*pgxpool.Pool, outbox.Table, *Relay, []store.Row, []uuid.UUID) {
	t.Helper()
	pool, table := testdb.NewUnpartitioned(t)
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "tid"})
	insertRows(t, pool, table, n)
	rows, ids := claimAll(t, r, "tid#1", n)
	return pool, table, r, rows, ids
}

// claimAll claims every row of r's table, n of them, for owner.
func claimAll(t *testing.T, r *Relay, owner string, n int) ([]store.Row, []uuid.UUID) {
	t.Helper()
	rows, _, err := r.store.Claim(context.Background(), owner, n, store.ClaimRange{From: store.Bottom}, nil)
	if err != nil || len(rows) != n {
		t.Fatalf("claim = %d rows, %v; want %d", len(rows), err, n)
	}
	ids := make([]uuid.UUID, n)
	for i := range rows {
		ids[i] = rows[i].ID
	}
	return rows, ids
}

// A batch the sink took whole is marked sent by the tuple ids its claim
// returned. The token fences that write as it fences the one by id: a row
// another claim took over stays as that claim left it.
func TestMarkSentByTupleIDLeavesRowsTheClaimLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, r, rows, ids := claimedPlain(t, 6)
	b := r.leases.leased(rows, "tid#1")
	tids := b.sentTIDs(&outcome{Outcome: store.Outcome{Sent: ids}})
	if len(tids) != len(rows) {
		t.Fatalf("sentTIDs of a batch sent whole = %d tuple ids; want %d", len(tids), len(rows))
	}
	// Another claim took one row over (its lease ran out, say).
	stolen := ids[2].String()
	if _, err := pool.Exec(ctx, "UPDATE "+table.Ident()+" SET locked_by = 'other#1' WHERE id = $1", stolen); err != nil {
		t.Fatal(err)
	}
	fenced, err := r.store.MarkSent(ctx, "tid#1", ids, tids)
	if err != nil || fenced != 1 {
		t.Fatalf("markSent by tuple id = %d fenced, %v; want 1", fenced, err)
	}
	for id, v := range statusOf(t, pool, table) {
		switch {
		case id == stolen && (v[0] != "processing" || v[1] != "other#1"):
			t.Errorf("the row another claim holds is %s by %q; want processing by other#1", v[0], v[1])
		case id != stolen && v[0] != "sent":
			t.Errorf("row %s is %s; want sent", id, v[0])
		}
	}
}

// A renewal writes new versions of the rows, so the claim's tuple ids no
// longer find them: a renewed batch, and one the sink did not take whole,
// is marked by id.
func TestRenewedOrPartlySentBatchesAreMarkedByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, r, rows, ids := claimedPlain(t, 3)
	b := r.leases.leased(rows, "tid#1")
	if tids := b.sentTIDs(&outcome{Outcome: store.Outcome{Sent: ids[:2]}}); tids != nil {
		t.Errorf("sentTIDs of a batch sent in part = %v; want nil", tids)
	}
	stale := b.sentTIDs(&outcome{Outcome: store.Outcome{Sent: ids}})
	if lost, err := b.renew(ctx); err != nil || lost != 0 {
		t.Fatalf("renew = %d lost, %v", lost, err)
	}
	if tids := b.sentTIDs(&outcome{Outcome: store.Outcome{Sent: ids}}); tids != nil {
		t.Errorf("sentTIDs after a renewal = %v; want nil", tids)
	}
	// Why: the tuple ids from before the renewal name no live row.
	if fenced, err := r.store.MarkSent(ctx, "tid#1", ids, stale); err != nil || fenced != len(ids) {
		t.Fatalf("markSent by the tuple ids from before the renewal = %d fenced, %v; want all %d (the test no longer shows why renewed batches go by id)", fenced, err, len(ids))
	}
	if fenced, err := r.store.MarkSent(ctx, "tid#1", ids, b.sentTIDs(&outcome{Outcome: store.Outcome{Sent: ids}})); err != nil || fenced != 0 {
		t.Fatalf("markSent of the renewed batch = %d fenced, %v; want 0", fenced, err)
	}
	for id, v := range statusOf(t, pool, table) {
		if v[0] != "sent" {
			t.Errorf("row %s is %s; want sent", id, v[0])
		}
	}
}

// On a partitioned table a tuple id names a row in each partition: the
// claim returns none, and its rows are marked sent by id.
func TestPartitionedClaimsReturnNoTupleIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, _ := partitionedWithPending(t, 4)
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "tid"})
	rows, ids := claimAll(t, r, "tid#1", 4)
	for _, x := range rows {
		if x.TID.Valid {
			t.Fatalf("row %s came with tuple id %v from a partitioned table; want none", x.ID, x.TID)
		}
	}
	if tids := r.leases.leased(rows, "tid#1").sentTIDs(&outcome{Outcome: store.Outcome{Sent: ids}}); tids != nil {
		t.Fatalf("sentTIDs on a partitioned table = %v; want nil", tids)
	}
	if fenced, err := r.store.MarkSent(ctx, "tid#1", ids, nil); err != nil || fenced != 0 {
		t.Fatalf("markSent = %d fenced, %v; want 0", fenced, err)
	}
}

// The claim of a plain table returns a tuple id for each row, and the one
// of the row's current version.
func TestPlainClaimsReturnTheRowsTupleIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table, _, rows, _ := claimedPlain(t, 3)
	for _, x := range rows {
		var now pgtype.TID
		if err := pool.QueryRow(ctx, "SELECT ctid FROM "+table.Ident()+" WHERE id = $1", x.ID.String()).Scan(&now); err != nil {
			t.Fatal(err)
		}
		if !x.TID.Valid || x.TID != store.TID(now) {
			t.Errorf("row %s came with tuple id %v; its version is at %v", x.ID, x.TID, now)
		}
	}
}

// The mark-sent by tuple id is a TID scan however many rows it marks and
// however small the table: given the array's length, the planner would
// read a small table whole instead.
func TestMarkSentByTupleIDIsATIDScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 1000 // a full batch, on a table of 1,000 rows: a few dozen pages
	pool, table, r, rows, ids := claimedPlain(t, n)
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	tids := r.leases.leased(rows, "tid#1").sentTIDs(&outcome{Outcome: store.Outcome{Sent: ids}})
	plan := explainPlan(t, pool, pgOf(r).q.markSentByTID, pgTIDs(tids), "tid#1")
	if !strings.Contains(plan, "Tid Scan") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("mark-sent of %d tuple ids on a table of %d rows:\n%s\nwant a Tid Scan", n, n, plan)
	}
	// The array as such: the planner reads the table whole (if it no
	// longer does, the sub-select is no longer needed).
	bare := strings.Replace(pgOf(r).q.markSentByTID, "ANY (ARRAY(SELECT unnest($1::tid[])))", "ANY ($1::tid[])", 1)
	if bare == pgOf(r).q.markSentByTID {
		t.Fatal("mark_sent_by_tid.sql no longer passes its tuple ids through a sub-select")
	}
	if p := explainPlan(t, pool, bare, pgTIDs(tids), "tid#1"); !strings.Contains(p, "Seq Scan") {
		t.Errorf("with the bare array the planner chose:\n%s\nthe test no longer tells the two apart", p)
	}
}

// The ordered write-back finds the sent rows by the tuple ids the claim
// returned: a TID scan, not a read of the table, even on a table of a few
// dozen pages. The claim's take fetches the rows it picked by primary key,
// on a plain table as on a partitioned one.
func TestOrderedStatementsGoByTupleID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 1000
	pool, table, r, rows, ids := claimedPlain(t, n)
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	tids := claimedTIDs(rows)
	lo, hi := idRange(pgIDs(ids))
	plan := explainPlan(t, pool, pgOf(r).q.recordOrdered, pgx.NamedArgs{"shard": 0, "lessee": "lessee", "owner": "owner",
		"sent": pgIDs(ids), "lo": lo, "hi": hi, "unknown": [][16]byte{}, "tids": pgTIDs(tids), "raise": nil})
	if !strings.Contains(plan, "Tid Scan") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("ordered write-back of %d sent rows by tuple id:\n%s\nwant a Tid Scan", n, plan)
	}
	plan = explainPlan(t, pool, pgOf(r).q.orderedTake, pgx.NamedArgs{"shard": 0, "lessee": "lessee", "owner": "owner", "lease_ms": 60000,
		"ids": pgIDs(ids[:500]), "revive": [][16]byte{}, "lo": lo, "hi": hi, "seen": nil, "floor": nil,
		"batch_bytes": 4 << 20, "event_bytes": 16 << 20})
	if !strings.Contains(plan, "_pkey") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("ordered claim's take:\n%s\nwant its rows fetched by primary key", plan)
	}
}

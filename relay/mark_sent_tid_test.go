package relay

import (
	"context"
	"testing"

	"github.com/google/uuid"
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
	testdb.InsertPending(t, pool, table, n)
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
	pool, table, _ := testdb.PartitionedWithPending(t, 4)
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

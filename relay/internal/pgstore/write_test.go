package pgstore

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

// claimedPlain returns a store on a new unpartitioned table of n pending
// rows, which it has claimed for "tid#1", and the claimed rows and ids.
func claimedPlain(t *testing.T, n int) (*pgxpool.Pool, outbox.Table, *Store, []store.Row, []uuid.UUID) {
	t.Helper()
	pool, table := testdb.NewUnpartitioned(t)
	s := newStore(t, pool, table)
	testdb.InsertPending(t, pool, table, n)
	rows, ids := claimAll(t, s, "tid#1", n)
	return pool, table, s, rows, ids
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
	pool, table, s, rows, _ := claimedPlain(t, n)
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	tids := store.TIDsOf(rows) // every row sent, none renewed (relay's sentTIDs)
	args := pgx.NamedArgs{"tids": pgTIDs(tids), "owner": "tid#1"}
	plan := explainPlan(t, pool, s.q.markSentByTID, args)
	if !strings.Contains(plan, "Tid Scan") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("mark-sent of %d tuple ids on a table of %d rows:\n%s\nwant a Tid Scan", n, n, plan)
	}
	// The array as such: the planner reads the table whole (if it no
	// longer does, the sub-select is no longer needed).
	bare := strings.Replace(s.q.markSentByTID, "ANY (ARRAY(SELECT unnest(@tids::tid[])))", "ANY (@tids::tid[])", 1)
	if bare == s.q.markSentByTID {
		t.Fatal("mark_sent_by_tid.sql no longer passes its tuple ids through a sub-select")
	}
	if p := explainPlan(t, pool, bare, args); !strings.Contains(p, "Seq Scan") {
		t.Errorf("with the bare array the planner chose:\n%s\nthe test no longer tells the two apart", p)
	}
}

// The ordered write-back finds the sent rows by the tuple ids the claim
// returned: a TID scan, not a read of the table, even on a table of a few
// dozen pages. The claim's take fetches the rows it picked at the tuple
// ids its read saw on a plain table (@by_tid), by primary key on a
// partitioned one.
func TestOrderedStatementsGoByTupleID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 1000
	pool, table, s, rows, ids := claimedPlain(t, n)
	if _, err := pool.Exec(ctx, "ANALYZE "+table.Ident()); err != nil {
		t.Fatal(err)
	}
	tids := store.TIDsOf(rows)
	lo, hi := idRange(pgIDs(ids))
	plan := explainPlan(t, pool, s.q.recordOrdered, pgx.NamedArgs{"shard": 0, "lessee": "lessee", "owner": "owner",
		"sent": pgIDs(ids), "lo": lo, "hi": hi, "unknown": [][16]byte{}, "tids": pgTIDs(tids), "raise": nil})
	if !strings.Contains(plan, "Tid Scan") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("ordered write-back of %d sent rows by tuple id:\n%s\nwant a Tid Scan", n, plan)
	}
	take := func(byTID bool) string {
		return explainPlan(t, pool, s.q.orderedTake, pgx.StrictNamedArgs{"shard": 0, "lessee": "lessee", "owner": "owner", "lease_ms": 60000,
			"ids": pgIDs(ids[:500]), "tids": pgTIDs(tids[:500]), "by_tid": byTID, "revive": [][16]byte{}, "lo": lo, "hi": hi,
			"seen": nil, "floor": nil, "batch_bytes": 4 << 20, "event_bytes": 16 << 20})
	}
	if plan := take(true); !strings.Contains(plan, "Tid Scan on outbox o ") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("ordered claim's take on a plain table:\n%s\nwant its rows fetched by tuple id", plan)
	}
	if plan := take(false); !strings.Contains(plan, "outbox_pkey") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("ordered claim's take by id:\n%s\nwant its rows fetched by primary key", plan)
	}
}

package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// The ordered write-back finds the sent rows by the tuple ids where the
// claim read them, checks the ids there, and marks a sent row that is no
// longer where it was by primary key in the same statement
// (record_ordered.sql). Here one sent row was updated since the claim (its
// tuple id names a dead version), and the other's tuple id names another
// row of its key, one not sent, as after a table rewrite that moved rows
// (built here directly: a rewrite keeps rows that other transactions of
// the server may still see where they were). The unsent row must stay
// pending (the id test), and both sent rows must be marked (the second
// update): a sent row left pending would be published again after the
// later events of its key.
func TestOrderedWriteBackMarksMovedRowsByID(t *testing.T) {
	t.Parallel()
	b := setupUnpartitioned(t) // a tuple id names one row only on a plain table
	b.leaseShardZero()
	key := b.keysIn(0, 1)[0]
	var msgs []outbox.Message
	for i := range 3 {
		msgs = append(msgs, outbox.Message{Topic: "orders", Key: []byte(key), Payload: fmt.Appendf(nil, "%d", i)})
	}
	ids := b.write(msgs...)
	slices.SortFunc(ids, compareUUID)
	await(t, time.Minute, func() bool { return len(b.claimShardZero(true)) == len(ids) }, "the rows never became claimable")

	// Claim the key's first two rows, with their tuple ids.
	rows, err := b.claimQuery(b.pool, 2)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	var sent []uuid.UUID
	var tids []pgtype.TID
	for rows.Next() {
		var id uuid.UUID
		var tid pgtype.TID
		var skip any
		if err := rows.Scan(&id, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &tid); err != nil {
			t.Fatalf("claim: %v", err)
		}
		sent, tids = append(sent, id), append(tids, tid)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if !slices.Equal(sent, ids[:2]) || !tids[0].Valid || !tids[1].Valid || tids[0] == tids[1] {
		t.Fatalf("claimed %v at %v, want %v with their tuple ids", sent, tids, ids[:2])
	}

	b.exec("UPDATE {{table}} SET headers = headers WHERE id = $1", sent[0])
	var moved, third pgtype.TID
	if err := b.pool.QueryRow(b.ctx, b.sql("SELECT ctid FROM {{table}} WHERE id = $1"), sent[0]).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(b.ctx, b.sql("SELECT ctid FROM {{table}} WHERE id = $1"), ids[2]).Scan(&third); err != nil {
		t.Fatal(err)
	}
	if moved == tids[0] {
		t.Fatalf("the update left the row at %v: the test would prove nothing", moved)
	}
	at := []pgtype.TID{tids[0], third} // the second sent row's place now holds the third row

	if got := b.recordSentAt(claimLessee, sent, at, nil); got != 2 {
		t.Errorf("the write-back marked %d rows sent, want 2", got)
	}
	want := []claimState{{"sent", 1}, {"sent", 1}, {"pending", 0}}
	if got := b.claimStates(ids); !slices.Equal(got, want) {
		t.Errorf("rows after the write-back: %v, want %v (the third was not sent)", got, want)
	}
}

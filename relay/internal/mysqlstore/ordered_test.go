package mysqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// setupOrdered returns a store of one shard, every topic ordered, with a
// lease of lease, on a table prepared for ordered delivery.
func setupOrdered(t *testing.T, lease time.Duration) *Store {
	t.Helper()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	s := New(db, Config{Lease: lease, Bounds: defaultBounds, Topics: []string{"*"}, Shards: 1})
	if _, err := migrations.UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureShards(ctx, 1); err == nil {
		t.Fatal("EnsureShards on a table not prepared: no error")
	}
	if _, err := migrations.PrepareOrderedMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureShards(ctx, 1); err != nil {
		t.Fatal(err)
	}
	return s
}

// A holder that dies keeps its shard until its lease lapses; the next
// holder counts an attempt for the rows it claimed, its late write-back
// writes nothing, and the rows go out again in seq order. A head in
// backoff holds its key's later rows back; once it fails (parked), they
// go on.
func TestOrderedLeaseLapseAndHeadOfLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := setupOrdered(t, 300*time.Millisecond)
	var k, j []uuid.UUID
	for i, key := range []string{"k", "j", "k", "k"} {
		id := uuid.Must(uuid.NewV7())
		if _, err := s.db.Exec("INSERT INTO outbox (id, topic, `key`, payload) VALUES (?, 't', ?, ?)", id[:], key, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if key == "k" {
			k = append(k, id)
		} else {
			j = append(j, id)
		}
	}
	lease := func(owner string) bool {
		t.Helper()
		_, ok, err := s.LeaseShard(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	claim := func(lessee string) []store.Row {
		t.Helper()
		c, _, err := s.ClaimOrdered(ctx, lessee+"/c", 10, 0, lessee, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Rows
	}
	ofKey := func(rows []store.Row, ids []uuid.UUID) []uuid.UUID {
		var out []uuid.UUID
		for _, r := range rows {
			for _, id := range ids {
				if r.ID == id {
					out = append(out, id)
				}
			}
		}
		return out
	}
	if !lease("A") {
		t.Fatal("A leased no shard")
	}
	rows := claim("A")
	if got := ofKey(rows, k); len(rows) != 4 || len(got) != 3 || got[0] != k[0] || got[1] != k[1] || got[2] != k[2] {
		t.Fatalf("A claimed %v, want k's three in seq order and j's", rows)
	}
	if lease("B") {
		t.Fatal("B leased the shard A holds")
	}
	// A dies. B waits for the lease to lapse.
	deadline := time.Now().Add(30 * time.Second)
	for !lease("B") {
		if time.Now().After(deadline) {
			t.Fatal("A's lease never lapsed")
		}
		time.Sleep(20 * time.Millisecond) // the lease's clock is the database's
	}
	late, err := s.RecordOrdered(ctx, store.OrderedWrite{Shard: 0, Lessee: "A", Owner: "A/c", Out: store.Outcome{Sent: []uuid.UUID{k[0], k[1], k[2], j[0]}}})
	if err != nil || late.Sent != 0 {
		t.Fatalf("A's late write-back: %+v, %v; want nothing written", late, err)
	}
	rows = claim("B")
	if len(rows) != 4 || rows[0].Attempt != 2 {
		t.Fatalf("B claimed %v, want the 4 rows at attempt 2 (A's claim counted)", rows)
	}
	// k's head retries in an hour: k waits, j is sent.
	w := store.OrderedWrite{Shard: 0, Lessee: "B", Owner: "B/c", Out: store.Outcome{Sent: j, Retries: []store.Retry{{ID: k[0], Delay: time.Hour, Error: "e"}}}}
	c, got, err := s.ClaimOrdered(ctx, "B/c2", 10, 0, "B", &w)
	if err != nil || got.Sent != 1 || got.Retried != 1 || !got.Written || len(c.Rows) != 0 {
		t.Fatalf("claim after a retried head: %v, %+v, %v; want nothing claimed", c.Rows, got, err)
	}
	// The head is parked: k's later rows go on, in order.
	w = store.OrderedWrite{Shard: 0, Lessee: "B", Owner: "B/c2", Out: store.Outcome{Failures: []store.Failure{{ID: k[0], Error: "parked: e"}}}}
	c, got, err = s.ClaimOrdered(ctx, "B/c3", 10, 0, "B", &w)
	if err != nil || got.Failed != 1 || len(c.Rows) != 2 || c.Rows[0].ID != k[1] || c.Rows[1].ID != k[2] || c.Rows[0].Tx >= c.Rows[1].Tx {
		t.Fatalf("claim after a parked head: %v, %+v, %v; want k's second and third", c.Rows, got, err)
	}
	w = store.OrderedWrite{Shard: 0, Lessee: "B", Owner: "B/c3", Out: store.Outcome{Sent: []uuid.UUID{k[1], k[2]}}}
	if got, err := s.HandBack(ctx, 0, "B", &w); err != nil || got.Sent != 2 {
		t.Fatalf("hand back: %+v, %v", got, err)
	}
	if lease("C") {
		t.Fatal("C leased a shard with no work")
	}
	var last string
	if err := s.db.QueryRow("SELECT last_error FROM outbox WHERE id = ?", k[0][:]).Scan(&last); err != nil || last != "parked: e" {
		t.Fatalf("head: %q, %v", last, err)
	}
}

package relay

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

func TestNextFloor(t *testing.T) {
	at := func(s int) pgtype.Timestamptz {
		return pgtype.Timestamptz{Time: time.Unix(int64(s), 0), Valid: true}
	}
	rw := func(due pgtype.Timestamptz, id byte) row { return row{id: [16]byte{15: id}, due: due} }
	inf := pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	for _, c := range []struct {
		name  string
		rows  []row
		limit int
		want  floor
	}{
		{"not full", []row{rw(at(5), 1)}, 2, bottom},
		{"empty", nil, 2, bottom},
		{"earliest due", []row{rw(at(7), 1), rw(at(5), 9), rw(at(6), 2)}, 3, floor{due: at(5), id: [16]byte{15: 9}}},
		{"same due, lowest id", []row{rw(at(5), 4), rw(at(5), 3)}, 2, floor{due: at(5), id: [16]byte{15: 3}}},
		{"infinite and null due ignored", []row{rw(inf, 1), rw(pgtype.Timestamptz{}, 2), rw(at(8), 3)}, 3, floor{due: at(8), id: [16]byte{15: 3}}},
		{"nothing finite", []row{rw(inf, 1)}, 1, bottom},
	} {
		got := nextFloor(c.rows, c.limit)
		if got.id != c.want.id || got.due.InfinityModifier != c.want.due.InfinityModifier || !got.due.Time.Equal(c.want.due.Time) {
			t.Errorf("%s: nextFloor = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// In a backlog Run's claims start at the lowest key the previous claim
// took: a row that turns up below it waits for the next claim that looks
// for lapsed leases, which starts at the bottom; a claim that does not fill
// its batch ends the backlog.
func TestClaimsInABacklogStartAtTheFloor(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "floor"})
	insertRows(t, pool, table, 6)

	if res, err := r.process(ctx, r.stream, 2, nil); err != nil || res.Claimed != 2 {
		t.Fatalf("first claim = %+v, %v; want 2 claimed", res, err)
	}
	if r.stream.floor == bottom {
		t.Fatal("a full batch left the floor at the bottom")
	}
	// A row committed late, its transaction older than the claimed rows.
	_, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+
		` (id, topic, payload, next_retry_at) VALUES (gen_random_uuid(), 'orders', '\x01', now() - interval '1 hour')`)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.process(ctx, r.stream, 2, nil); err != nil || res.Claimed != 2 {
		t.Fatalf("claim in the backlog = %+v, %v; want 2 claimed", res, err)
	}
	if n := pendingPayloads(t, pool, table, `\x01`); n != 1 {
		t.Fatalf("the late row was claimed from above the floor (%d left pending)", n)
	}
	r.stream.lapsedAt = r.stream.lapsedAt.Add(-lapsedEvery) // the next claim looks for lapsed leases
	if res, err := r.process(ctx, r.stream, 2, nil); err != nil || res.Claimed != 2 {
		t.Fatalf("claim from the bottom = %+v, %v; want 2 claimed", res, err)
	}
	if n := pendingPayloads(t, pool, table, `\x01`); n != 0 {
		t.Fatal("the claim that looks for lapsed leases left the late row")
	}
	// One row is left: the batch is not full, and the backlog is over.
	if res, err := r.process(ctx, r.stream, 2, nil); err != nil || res.Claimed != 1 {
		t.Fatalf("last claim = %+v, %v; want 1 claimed", res, err)
	}
	if r.stream.floor != bottom {
		t.Fatalf("floor after a batch that was not full = %+v; want the bottom", r.stream.floor)
	}
	r.stream.sent.flush(context.Background())
	testdb.AwaitSent(t, pool, table, 7, 20*time.Second)
}

// pendingPayloads counts the pending rows whose payload is the bytea
// literal payload.
func pendingPayloads(t *testing.T, pool *pgxpool.Pool, table outbox.Table, payload string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table.Ident()+
		" WHERE status = 'pending' AND payload = $1::text::bytea", payload).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

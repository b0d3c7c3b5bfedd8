package relay

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

// statusOf returns each row's status, locked_by and writing transaction
// (xmin), by id.
func statusOf(t *testing.T, pool *pgxpool.Pool, table outbox.Table) map[string][3]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT id::text, status, coalesce(locked_by, ''), xmin::text FROM "+table.Ident())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][3]string{}
	for rows.Next() {
		var id string
		var v [3]string
		if err := rows.Scan(&id, &v[0], &v[1], &v[2]); err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// quietRelay returns a relay of cfg that publishes to pub and logs nothing.
func quietRelay(t testing.TB, pool *pgxpool.Pool, pub publishers.Publisher, cfg Config) *Relay {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := New(pool, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A lease batch the sink took whole is marked sent by the next claim, in
// the claim's own transaction; a row another claim holds by then is left
// alone; what no claim took is marked on its own by flush.
func TestSentRowsRideOnTheNextClaim(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "ride"})
	r.stream.sent = newSentBatching(r.pipe, time.Hour) // no timer: only a claim or flush marks rows

	testdb.InsertPending(t, pool, table, 3)
	res, err := r.pipe.process(ctx, r.stream, 0, nil)
	if err != nil || res.Claimed != 3 || res.Sent != 0 {
		t.Fatalf("first batch = %+v, %v; want 3 claimed, none marked sent yet", res, err)
	}
	first := statusOf(t, pool, table)
	var stolen string
	for id, v := range first {
		if v[0] != "processing" {
			t.Fatalf("row %s is %s after its publish; want processing until a claim marks it", id, v[0])
		}
		stolen = id
	}
	// Another claim took one row over (the lease ran out, say).
	if _, err := pool.Exec(ctx, "UPDATE "+table.Ident()+" SET locked_by = 'other#1' WHERE id = $1", stolen); err != nil {
		t.Fatal(err)
	}

	testdb.InsertPending(t, pool, table, 2)
	res, err = r.pipe.process(ctx, r.stream, 0, nil)
	if err != nil || res.Claimed != 2 {
		t.Fatalf("second batch = %+v, %v; want 2 claimed", res, err)
	}
	second := statusOf(t, pool, table)
	var claimTx string
	for id, v := range second {
		if _, old := first[id]; !old && v[0] == "processing" {
			claimTx = v[2]
		}
	}
	for id, v := range second {
		switch _, old := first[id]; {
		case id == stolen:
			if v[0] != "processing" || v[1] != "other#1" {
				t.Errorf("the row another claim holds is %s by %q; want it left processing by other#1", v[0], v[1])
			}
		case old:
			if v[0] != "sent" || v[2] != claimTx {
				t.Errorf("row %s of the first batch is %s, written by transaction %s; want sent by the second claim's transaction %s", id, v[0], v[2], claimTx)
			}
		case v[0] != "processing":
			t.Errorf("row %s of the second batch is %s; want processing", id, v[0])
		}
	}

	r.stream.sent.flush(context.Background())
	third := statusOf(t, pool, table)
	for id, v := range third {
		if _, old := first[id]; !old && v[0] != "sent" {
			t.Errorf("row %s of the second batch is %s after flush; want sent", id, v[0])
		}
	}
	if left := r.stream.sent.take(); len(left) != 0 {
		t.Fatalf("%d batches still wait after flush", len(left))
	}
}

// A batch of sentBatchMax rows or more is recorded at once instead of riding,
// so that its mark-sent runs beside the next claim, not in it.
func TestLargeBatchesDoNotRide(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "large", BatchSize: 1000})
	r.stream.sent = newSentBatching(r.pipe, time.Hour) // no timer: a waiting batch would stay processing
	testdb.InsertPending(t, pool, table, sentBatchMax+1)
	res, err := r.pipe.process(context.Background(), r.stream, sentBatchMax, nil)
	if err != nil || res.Claimed != sentBatchMax || res.Sent != sentBatchMax {
		t.Fatalf("batch = %+v, %v; want %d claimed and sent", res, err, sentBatchMax)
	}
	if left := r.stream.sent.take(); len(left) != 0 {
		t.Fatalf("%d batches wait after a batch of %d; want none", len(left), sentBatchMax)
	}
	sent := 0
	for _, v := range statusOf(t, pool, table) {
		if v[0] == "sent" {
			sent++
		}
	}
	if sent != sentBatchMax {
		t.Fatalf("%d rows sent after the batch returned; want %d", sent, sentBatchMax)
	}
}

// On a quiet table no claim comes: published rows are marked sent on
// their own after sentBatchWait.
func TestRidersAreMarkedWithoutAClaim(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "alone"})
	testdb.InsertPending(t, pool, table, 2)
	if res, err := r.pipe.process(context.Background(), r.stream, 0, nil); err != nil || res.Claimed != 2 {
		t.Fatalf("batch = %+v, %v; want 2 claimed", res, err)
	}
	testdb.AwaitSent(t, pool, table, 2, 20*time.Second)
}

// countingPublisher acknowledges every message and counts them.
type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(_ context.Context, msgs []outbox.Message) error {
	p.n.Add(int64(len(msgs)))
	return nil
}
func (p *countingPublisher) Close() error { return nil }

// Run marks the rows still waiting for a claim sent before it returns.
func TestRunMarksRidersOnShutdown(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	pub := &countingPublisher{}
	r := quietRelay(t, pool, pub, Config{Table: table, ID: "shutdown", PollInterval: time.Minute})
	r.stream.sent = newSentBatching(r.pipe, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testdb.InsertPending(t, pool, table, 5)
	deadline := time.Now().Add(20 * time.Second)
	for pub.n.Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 5 rows published after 20s", pub.n.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	for id, v := range statusOf(t, pool, table) {
		if v[0] != "sent" {
			t.Errorf("row %s is %s after Run returned; want sent", id, v[0])
		}
	}
}

// Run's claims look for lapsed leases only when none did within
// lapsedEvery; ProcessBatch always does.
func TestRunClaimsLookForLapsedLeasesEveryQuarterSecond(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	ctx := context.Background()
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "lapsed"})
	testdb.InsertPending(t, pool, table, 1)
	_, err := pool.Exec(ctx, "UPDATE "+table.Ident()+
		" SET status = 'processing', locked_by = 'dead#1', locked_until = now() - interval '1 second', attempt = 1")
	if err != nil {
		t.Fatal(err)
	}
	if !r.stream.lapsedDue() || r.stream.lapsedDue() {
		t.Fatal("lapsedDue: want true once, then false within lapsedEvery")
	}
	if res, err := r.pipe.process(ctx, r.stream, 0, nil); err != nil || res.Claimed != 0 {
		t.Fatalf("claim right after another looked = %+v, %v; want the lapsed row left for later", res, err)
	}
	r.stream.lapsedAt = r.stream.lapsedAt.Add(-lapsedEvery)
	if res, err := r.pipe.process(ctx, r.stream, 0, nil); err != nil || res.Claimed != 1 {
		t.Fatalf("claim lapsedEvery later = %+v, %v; want the lapsed row rescued", res, err)
	}
	r.stream.sent.flush(context.Background())
	for id, v := range statusOf(t, pool, table) {
		if v[0] != "sent" || v[1] == "dead#1" {
			t.Errorf("rescued row %s is %s by %q; want sent by this relay's claim", id, v[0], v[1])
		}
	}
}

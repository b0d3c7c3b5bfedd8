package relay

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// BenchmarkOrderedCycle measures what the database spends per event on
// the statements of one claim-and-write-back cycle, without a sink and
// on one connection, so that nothing else competes for the CPU: an
// unordered cycle is a lease claim of 500 rows and its mark-sent; an
// ordered one is a shard lease, claims of 500 rows until the shard's
// budget of 1,000 (each written back as sent, on the next claim or the
// hand-back, as the relay does) and the hand-back. The
// table holds 100,000 events of 1,000 keys and is written again when it
// runs dry (not timed). Compare us/event of the two modes within one run
// (docs/benchmarks.md#ordered-delivery).
//
// With OUTBOX_CYCLE_DELAY set (a duration such as 250us), the connection
// goes through the project's fault proxy, which holds every chunk it
// forwards that long: a database further away than loopback, where each
// round trip counts.
func BenchmarkOrderedCycle(b *testing.B) {
	for _, mode := range []string{"unordered", "ordered"} {
		b.Run("mode="+mode, func(b *testing.B) {
			benchCycle(b, mode == "ordered")
		})
	}
}

func benchCycle(b *testing.B, ordered bool) {
	const (
		batch  = 500
		budget = 2 * batch
		events = 100000
		keys   = 1000
	)
	ctx := context.Background()
	testPool, table := testdb.New(b)
	if ordered { // as `relay migrate up --ordered` prepares it
		if _, err := migrations.PrepareOrdered(ctx, testPool, table); err != nil {
			b.Fatal(err)
		}
	}
	// A pool configured as relay run configures its own.
	pcfg, err := pgxpool.ParseConfig(testdb.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	ConfigurePool(pcfg)
	if d := os.Getenv("OUTBOX_CYCLE_DELAY"); d != "" {
		delayed(b, pcfg, d)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	cfg := Config{Table: table, ID: "cycle"}
	if ordered {
		cfg.Ordering = Ordering{Topics: []string{"*"}, Shards: 16}
	}
	r := quietRelay(b, pool, nopPublisher{}, cfg)
	if ordered {
		if err := r.shards.EnsureShards(ctx, cfg.Ordering.Shards); err != nil {
			b.Fatal(err)
		}
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	fill := func() {
		b.StopTimer()
		defer b.StartTimer()
		for done := 0; done < events; done += 1000 {
			msgs := make([]outbox.Message, 1000)
			for i := range msgs {
				msgs[i] = outbox.Message{Topic: "bench", Key: fmt.Appendf(nil, "key-%d", (done+i)%keys), Payload: make([]byte, 100)}
			}
			if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table.Ident()); err != nil {
			b.Fatal(err)
		}
	}
	fill()
	sent := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var n int
		if ordered {
			n = orderedCycle(b, r, batch, budget)
		} else {
			n = unorderedCycle(b, r, batch)
		}
		if n == 0 {
			fill()
			i--
		}
		sent += n
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(max(sent, 1)), "us/event")
}

// unorderedCycle claims up to batch rows and marks them sent.
func unorderedCycle(b *testing.B, r *Relay, batch int) int {
	ctx := context.Background()
	rows, _, err := r.store.Claim(ctx, "cycle#1", batch, store.ClaimRange{From: store.Bottom}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if len(rows) == 0 {
		return 0
	}
	ids := make([]uuid.UUID, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	if _, err := r.store.MarkSent(ctx, "cycle#1", ids, store.TIDsOf(rows)); err != nil {
		b.Fatal(err)
	}
	return len(rows)
}

// orderedCycle leases a shard, claims batches of it until budget rows or
// a short batch, and hands the shard back; as in the relay, each batch's
// write-back (all sent) rides on the next claim or the hand-back.
func orderedCycle(b *testing.B, r *Relay, batch, budget int) int {
	ctx := context.Background()
	shard, ok, err := r.shards.LeaseShard(ctx, "cycle-lease")
	if err != nil {
		b.Fatal(err)
	}
	if !ok {
		return 0
	}
	n := 0
	var prior *store.OrderedWrite
	check := func(got store.Recorded) {
		if prior != nil && got.Sent != len(prior.Out.Sent) {
			b.Fatalf("write-back = %d sent; want %d", got.Sent, len(prior.Out.Sent))
		}
		prior = nil
	}
	for n < budget {
		claimed, got, err := r.shards.ClaimOrdered(ctx, "cycle#1", batch, shard, "cycle-lease", prior)
		if err != nil {
			b.Fatal(err)
		}
		check(got)
		rows := claimed.Rows
		if len(rows) > 0 {
			out := &outcome{}
			for _, x := range rows {
				out.Sent = append(out.Sent, x.ID)
			}
			prior = &store.OrderedWrite{Shard: shard, Lessee: "cycle-lease", Owner: "cycle#1", Out: out.Outcome, TIDs: store.TIDsOf(rows), Raise: claimed.Raise(len(out.Sent))}
		}
		n += len(rows)
		if len(rows) < batch {
			break
		}
	}
	got, err := r.shards.HandBack(ctx, shard, "cycle-lease", prior)
	if err != nil {
		b.Fatal(err)
	}
	check(got)
	return n
}

// delayed points pcfg at a fault proxy in front of its server that holds
// every chunk for the duration d.
func delayed(b *testing.B, pcfg *pgxpool.Config, d string) {
	delay, err := time.ParseDuration(d)
	if err != nil {
		b.Fatalf("OUTBOX_CYCLE_DELAY: %v", err)
	}
	testdb.Proxied(b, pcfg).Slow(delay)
}

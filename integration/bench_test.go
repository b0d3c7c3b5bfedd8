package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Benchmarks of the core paths. Run them with
//
//	go test ./integration -run '^$' -bench . -benchtime 2000x
//
// and compare figures as ratios within one run: see docs/benchmarks.md.

var benchPayload = []byte(fmt.Sprintf("%0200d", 0)) // 200 bytes, as in the ceiling measurements

// BenchmarkWriteSingle commits one event per transaction through Writer.Write.
func BenchmarkWriteSingle(b *testing.B) {
	ctx := context.Background()
	pool, table := testdb.New(b)
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Write(ctx, tx, outbox.Message{Topic: "bench", Key: []byte("k"), Payload: benchPayload}); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkPlainInsertSingle is the baseline for BenchmarkWriteSingle: the
// same row (UUIDv7 id included) inserted with a hand-written INSERT, no
// validation, headers encoding or dedup.
func BenchmarkPlainInsertSingle(b *testing.B) {
	ctx := context.Background()
	pool, table := testdb.New(b)
	q := "INSERT INTO " + table.Ident() + " (id, topic, key, payload) VALUES ($1, $2, $3, $4)"
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(ctx, q, uuid.Must(uuid.NewV7()), "bench", []byte("k"), benchPayload); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkWriteBatch commits batches of events through Writer.WriteBatch
// (COPY); one op is one event. key=default is the table `relay migrate up`
// makes, key=ordered the one `relay migrate up --ordered` prepares (its
// primary key half full): they run next to each other
// (docs/benchmarks.md#writers-and-the-ordered-key). With the server on
// this host, db-cpu-us/event is the CPU time of the server process that
// ran the writes, which a busy host disturbs less than events/s.
func BenchmarkWriteBatch(b *testing.B) {
	for _, size := range []int{100, 1000} {
		for _, key := range []string{"default", "ordered"} {
			b.Run(fmt.Sprintf("size=%d/key=%s", size, key), func(b *testing.B) {
				benchWriteBatch(b, size, key == "ordered")
			})
		}
	}
}

func benchWriteBatch(b *testing.B, size int, ordered bool) {
	ctx := context.Background()
	pool, table := testdb.New(b)
	if ordered {
		if _, err := migrations.PrepareOrdered(ctx, pool, table); err != nil {
			b.Fatal(err)
		}
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	pid := int(conn.Conn().PgConn().PID())
	msgs := make([]outbox.Message, size)
	cpu0 := processTicks(pid)
	b.ResetTimer()
	for done := 0; done < b.N; done += size {
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: "bench", Key: []byte("k"), Payload: benchPayload}
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.WriteBatch(ctx, tx, msgs[:min(size, b.N-done)]); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if cpu1 := processTicks(pid); cpu0 >= 0 && cpu1 >= 0 {
		b.ReportMetric(float64(cpu1-cpu0)*1e4/float64(b.N), "db-cpu-us/event")
	}
}

// processTicks returns the CPU time (user and system) process pid has
// used, in clock ticks (1/100 s), from /proc; -1 where there is none (a
// server on another host).
func processTicks(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command, which is in parentheses: utime and
	// stime are the 12th and 13th.
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return utime + stime
}

// BenchmarkRelayDrain measures burn-down: b.N events are written first, then
// one relay publishes them all to a kfake broker over TCP (acks=all); one op
// is one event, timed from the relay's start to the last row marked sent.
func BenchmarkRelayDrain(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			pool, table := testdb.New(b)
			w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
			if err != nil {
				b.Fatal(err)
			}
			for done := 0; done < b.N; done += 1000 {
				msgs := make([]outbox.Message, min(1000, b.N-done))
				for i := range msgs {
					msgs[i] = outbox.Message{Topic: "bench", Key: fmt.Appendf(nil, "key-%d", done+i), Payload: benchPayload}
				}
				if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table.Ident()); err != nil {
				b.Fatal(err)
			}
			br, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"bench"}})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			pub, err := kafka.New(kafka.Config{Brokers: br.Addrs(), BatchSize: batch})
			if err != nil {
				b.Fatal(err)
			}
			defer pub.Close()
			r, err := relay.New(pool, pub, relay.Config{Table: table, BatchSize: batch, Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			sent := 0
			for sent < b.N {
				res, err := r.ProcessBatch(ctx, 0)
				if err != nil {
					b.Fatal(err)
				}
				if res.Sent != res.Claimed {
					b.Fatalf("batch %+v: not all sent", res)
				}
				sent += res.Sent
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkClaim checks that the claim path does not slow down with a large
// history of sent rows: one op is a claim of 100 rows and their release (the
// sink reports itself down), on a table of 1,000 pending rows with no sent
// rows and with 200,000. Compare the two as a ratio.
func BenchmarkClaim(b *testing.B) {
	for _, sentRows := range []int{0, 200000} {
		b.Run(fmt.Sprintf("sent=%d", sentRows), func(b *testing.B) {
			ctx := context.Background()
			pool, table := testdb.New(b)
			_, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+` (id, topic, payload, status, sent_at)
SELECT gen_random_uuid(), 'bench', $1, 'sent', now() FROM generate_series(1, $2)`, benchPayload, sentRows)
			if err != nil {
				b.Fatal(err)
			}
			_, err = pool.Exec(ctx, "INSERT INTO "+table.Ident()+` (id, topic, payload)
SELECT gen_random_uuid(), 'bench', $1 FROM generate_series(1, 1000)`, benchPayload)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table.Ident()); err != nil {
				b.Fatal(err)
			}
			r, err := relay.New(pool, unavailableSink{}, relay.Config{Table: table, Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := r.ProcessBatch(ctx, 100)
				if err != nil || res.Released != 100 {
					b.Fatalf("claim: %+v, %v", res, err)
				}
			}
		})
	}
}

// unavailableSink reports the sink down, so every claimed row is released.
type unavailableSink struct{}

func (unavailableSink) Publish(context.Context, []outbox.Message) error {
	return publishers.Unavailable(errors.New("benchmark sink is always down"))
}
func (unavailableSink) Close() error { return nil }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// BenchmarkWriteNotify measures what the wake-up notification (migration
// 003's trigger) costs writers: 4 concurrent writers, one event per
// transaction, with the trigger enabled and disabled. NOTIFY takes a
// cluster-wide lock at commit, so concurrent commits are where it shows.
func BenchmarkWriteNotify(b *testing.B) {
	for _, notify := range []bool{true, false} {
		b.Run(fmt.Sprintf("notify=%t", notify), func(b *testing.B) {
			ctx := context.Background()
			pool, table := testdb.New(b)
			if !notify {
				if _, err := pool.Exec(ctx, "ALTER TABLE "+table.Ident()+" DISABLE TRIGGER "+pgx.Identifier{table.Name + "_notify"}.Sanitize()); err != nil {
					b.Fatal(err)
				}
			}
			w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
			if err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(4 / runtime.GOMAXPROCS(0))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tx, err := pool.Begin(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := w.Write(ctx, tx, outbox.Message{Topic: "bench", Key: []byte("k"), Payload: benchPayload}); err != nil {
						b.Error(err)
						return
					}
					if err := tx.Commit(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

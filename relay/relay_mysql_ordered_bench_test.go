package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// BenchmarkMySQLOrderedVsUnordered measures ordered delivery on MariaDB
// against unordered, at 10, 1,000 and 100,000 keys: each sub-benchmark
// writes max(b.N, 20,000) events of 200 bytes in transactions of 100
// (keys round-robin), then times one relay draining them into a sink that
// keeps nothing and batches by key (as Kafka's does). Compare the modes of
// one key count as a ratio of events/s. write_µs/event is the writers'
// cost: with ordering prepared (migrations.PrepareOrderedMySQL), each
// keyed insert also bumps its key's counter row.
//
//	go test ./relay -run '^$' -bench MySQLOrderedVsUnordered -benchtime 20000x -count 3
func BenchmarkMySQLOrderedVsUnordered(b *testing.B) {
	for _, keys := range []int{10, 1000, 100000} {
		for _, mode := range []string{"unordered", "ordered"} {
			b.Run(fmt.Sprintf("keys=%d/mode=%s", keys, mode), func(b *testing.B) { benchMySQLOrdered(b, mode == "ordered", keys) })
		}
	}
}

// keySink is a sink that keeps nothing and takes a key's run in one call.
type keySink struct{}

func (keySink) Publish(context.Context, []outbox.Message) error { return nil }
func (keySink) KeyBatches() bool                                { return true }
func (keySink) Close() error                                    { return nil }

func benchMySQLOrdered(b *testing.B, ordered bool, keys int) {
	ctx := context.Background()
	n := max(b.N, 20000)
	db := setupMySQLBench(b)
	if ordered {
		if _, err := migrations.PrepareOrderedMySQL(ctx, db, outbox.Table{}); err != nil {
			b.Fatal(err)
		}
	}
	written := time.Now()
	for done := 0; done < n; done += 100 {
		msgs := make([]outbox.Message, min(100, n-done))
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: "bench", Key: fmt.Appendf(nil, "key-%d", (done+i)%keys), Payload: make([]byte, 200)}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := outbox.WriteBatch(ctx, outbox.FromMySQL(tx), msgs); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	writeCost := time.Since(written)

	var sent atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	cfg := Config{BatchSize: 500, PollInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Observer: ObserverFunc(func(e Event) {
			if e.Kind == EventRecorded && sent.Add(int64(e.Result.Sent)) >= int64(n) {
				once.Do(func() { close(all) })
			}
		})}
	if ordered {
		cfg.Ordering = Ordering{Topics: []string{"*"}, Shards: 16}
	}
	r, err := NewMySQL(db, keySink{}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { done <- r.Run(runCtx) }()
	<-all
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Errorf("Run: %v", err)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(writeCost.Microseconds())/float64(n), "write_µs/event")
}

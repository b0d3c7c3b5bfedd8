package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// BenchmarkOutageRecovery measures how fast relays resume after a Kafka
// outage: three relays with default settings publish a steady stream (200
// events/s) to a broker that is then closed for the outage's length, the
// stream going on, and started again on the same port with its data. It
// reports the time from the broker's return to the first event published
// after it (heal-to-first-ms) and to the last of the events the outage held
// back (heal-to-drained-ms), and how many that was (backlog).
//
//	go test ./integration -run '^$' -bench OutageRecovery -benchtime 1x
//
// OUTBOX_BENCH_OUTAGES sets the outage lengths (default 5s,30s,2m).
func BenchmarkOutageRecovery(b *testing.B) {
	lengths := []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute}
	if v := os.Getenv("OUTBOX_BENCH_OUTAGES"); v != "" {
		lengths = nil
		for _, s := range strings.Split(v, ",") {
			d, err := time.ParseDuration(s)
			if err != nil {
				b.Fatalf("OUTBOX_BENCH_OUTAGES: %v", err)
			}
			lengths = append(lengths, d)
		}
	}
	for _, length := range lengths {
		b.Run(length.String(), func(b *testing.B) {
			for range b.N {
				first, drained, backlog := outageRecovery(b, length)
				b.ReportMetric(float64(first.Milliseconds()), "heal-to-first-ms")
				b.ReportMetric(float64(drained.Milliseconds()), "heal-to-drained-ms")
				b.ReportMetric(float64(backlog), "backlog")
			}
		})
	}
}

// outageRecovery runs one outage of the given length; see
// BenchmarkOutageRecovery.
func outageRecovery(b *testing.B, length time.Duration) (toFirst, toDrained time.Duration, backlog int) {
	ctx := context.Background()
	pool, table := testdb.New(b)
	port := freePort(b)
	opts := kfakebroker.Options{Port: port, Topics: []string{"outage"}, DataDir: b.TempDir()}
	br, err := kfakebroker.Start(opts)
	if err != nil {
		b.Fatal(err)
	}
	var relays []func()
	for range 3 {
		pub, err := kafka.New(kafka.Config{Brokers: br.Addrs()})
		if err != nil {
			b.Fatal(err)
		}
		r, err := relay.New(pool, pub, relay.Config{Table: table, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := r.Run(rctx); err != nil {
				b.Error(err)
			}
		}()
		relays = append(relays, func() {
			cancel()
			<-done
			pub.Close()
		})
	}
	defer func() {
		for _, stop := range relays {
			stop()
		}
	}()

	// A steady stream: 20 events every 100ms.
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	sctx, stopStream := context.WithCancel(ctx)
	var stream sync.WaitGroup
	stream.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for sctx.Err() == nil {
			msgs := make([]outbox.Message, 20)
			for i := range msgs {
				msgs[i] = outbox.Message{Topic: "outage", Key: []byte(strconv.Itoa(i)), Payload: benchPayload}
			}
			if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
				b.Error(err)
				return
			}
			select {
			case <-sctx.Done():
			case <-t.C:
			}
		}
	})
	defer func() {
		stopStream()
		stream.Wait()
	}()
	count := func(where string) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE "+where).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	for deadline := time.Now().Add(30 * time.Second); count("status = 'sent'") < 200; {
		if time.Now().After(deadline) {
			b.Fatal("nothing flows before the outage")
		}
		time.Sleep(10 * time.Millisecond)
	}

	b.ResetTimer()
	br.Close()
	time.Sleep(length) // the outage
	var healed time.Time
	if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&healed); err != nil {
		b.Fatal(err)
	}
	backlog = count("status <> 'sent'")
	br, err = kfakebroker.Start(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	// Drained: every event written before the broker came back is sent.
	before := fmt.Sprintf("created_at <= '%s'", healed.Format(time.RFC3339Nano))
	for deadline := time.Now().Add(length + 2*time.Minute); count(before+" AND status <> 'sent'") > 0; {
		if time.Now().After(deadline) {
			b.Fatalf("the backlog did not drain within %v of the broker's return", length+2*time.Minute)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	var first, last time.Time
	if err := pool.QueryRow(ctx, "SELECT min(sent_at), max(sent_at) FROM "+table.Ident()+" WHERE sent_at >= $1 AND "+before, healed).Scan(&first, &last); err != nil {
		b.Fatal(err)
	}
	return first.Sub(healed), last.Sub(healed), backlog
}

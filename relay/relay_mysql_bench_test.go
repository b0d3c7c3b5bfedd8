package relay

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// BenchmarkMySQLSteady measures the relay's wake-up on MariaDB, where it
// polls (no LISTEN/NOTIFY; adaptive polling, Config.PollMin): b.N events
// written at a steady rate, each in its own transaction through
// outbox.FromMySQL, to a relay with default settings, and reports the
// latency from each commit to the sink's receipt (p50, p99, max; one
// process, one clock), the claims per second while events flow, and the
// claims per second of the idle relay afterwards (its cost to an idle
// database).
//
//	go test ./relay -run '^$' -bench MySQLSteady -benchtime 5000x
func BenchmarkMySQLSteady(b *testing.B) {
	for _, rate := range []int{200, 1000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) { benchmarkMySQLSteady(b, rate) })
	}
}

// latencyPublisher notes when each event reaches it.
type latencyPublisher struct {
	mu       sync.Mutex
	received map[[16]byte]time.Time
}

func (p *latencyPublisher) Publish(_ context.Context, msgs []outbox.Message) error {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		if _, seen := p.received[m.ID]; !seen {
			p.received[m.ID] = now
		}
	}
	return nil
}

func (p *latencyPublisher) Close() error { return nil }

// claimCounter counts the claim statements a relay runs.
type claimCounter struct{ n atomic.Int64 }

func (c *claimCounter) Observe(e Event) {
	if e.Kind == EventClaimed {
		c.n.Add(1)
	}
}

func benchmarkMySQLSteady(b *testing.B, rate int) {
	db := setupMySQLBench(b)
	ctx := context.Background()
	pub := &latencyPublisher{received: map[[16]byte]time.Time{}}
	claims := &claimCounter{}
	r, err := NewMySQL(db, pub, Config{Observer: claims, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	}()

	// The arrival schedule, written by 8 writers so that a slow commit
	// does not hold back the events after it.
	var mu sync.Mutex
	committed := make(map[[16]byte]time.Time, b.N)
	interval := time.Second / time.Duration(rate)
	due := make(chan struct{})
	var writers sync.WaitGroup
	for range 8 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for range due {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Error(err)
					return
				}
				res, err := outbox.Write(ctx, outbox.FromMySQL(tx), outbox.Message{Topic: "steady", Payload: make([]byte, 200)})
				if err == nil {
					err = tx.Commit()
				}
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				committed[res.ID] = time.Now()
				mu.Unlock()
			}
		}()
	}
	b.ResetTimer()
	start := time.Now()
	claimsBefore := claims.n.Load()
	for i := range b.N {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait) // the arrival schedule
		}
		due <- struct{}{}
	}
	close(due)
	writers.Wait()
	written := time.Since(start)
	if b.Failed() {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pub.mu.Lock()
		n := len(pub.received)
		pub.mu.Unlock()
		if n >= b.N {
			break
		}
		time.Sleep(10 * time.Millisecond) // waiting for the last events to arrive
	}
	flowing := time.Since(start)
	claimsFlowing := claims.n.Load() - claimsBefore
	b.StopTimer()

	// The idle relay, once its polls have backed off to PollInterval
	// (about a second after the last event): four seconds with nothing to
	// claim.
	time.Sleep(2 * time.Second) // the back-off
	idleFrom := claims.n.Load()
	time.Sleep(4 * time.Second) // a fixed window to count polls in
	idleClaims := claims.n.Load() - idleFrom

	pub.mu.Lock()
	defer pub.mu.Unlock()
	lat := make([]float64, 0, len(committed))
	for id, at := range committed {
		got, ok := pub.received[id]
		if !ok {
			b.Fatalf("event %x never reached the sink", id)
		}
		lat = append(lat, float64(got.Sub(at).Microseconds())/1000)
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(lat[len(lat)-1], "max_ms")
	b.ReportMetric(float64(b.N)/written.Seconds(), "written/s")
	b.ReportMetric(float64(claimsFlowing)/flowing.Seconds(), "claims/s")
	b.ReportMetric(float64(idleClaims)/4, "idle_claims/s")
}

// setupMySQLBench returns a migrated database of the benchmark's own.
func setupMySQLBench(b *testing.B) *sql.DB {
	b.Helper()
	db, _ := mariadbtest.DB(b)
	if _, err := migrations.UpMySQL(context.Background(), db, outbox.Table{}); err != nil {
		b.Fatalf("migrate: %v", err)
	}
	return db
}

package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/stdout"
	"github.com/outboxrelay/outboxrelay/relay"
	"github.com/outboxrelay/outboxrelay/relay/metrics"
)

// A flood of /readyz costs the database one ping and one schema check
// per readyCacheFor, not one per request; and when the answer is always
// stale, the checks still run one at a time.
func TestReadyzFloodIsBounded(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	r, err := relay.New(pool, stdout.New(io.Discard), relay.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	var pings, checks, inFlight, maxInFlight atomic.Int64
	counted := func(n *atomic.Int64, f func() error) error {
		n.Add(1)
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); now > m && !maxInFlight.CompareAndSwap(m, now); m = maxInFlight.Load() {
		}
		return f()
	}
	var clock atomic.Int64 // nanoseconds since start
	start, step := time.Now(), atomic.Int64{}
	h := &health{
		relays: []tableRelay{{table, r}},
		ping:   func(ctx context.Context) error { return counted(&pings, func() error { return pool.Ping(ctx) }) },
		check: func(ctx context.Context, tb outbox.Table) error {
			return counted(&checks, func() error { return migrations.Check(ctx, pool, tb) })
		},
		outage: func() metrics.Outage { return metrics.Outage{} },
		// Not readyTimeout: the test counts checks, and a loaded host
		// may take longer than 900 ms to answer one.
		timeout: time.Minute,
		now:     func() time.Time { return start.Add(time.Duration(clock.Add(step.Load()))) },
	}
	srv := httptest.NewServer(http.HandlerFunc(h.ready))
	defer srv.Close()
	flood := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				resp, err := http.Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "database: ok\nschema: ok\n") {
					t.Errorf("/readyz: %s\n%s", resp.Status, body)
				}
			})
		}
		wg.Wait()
	}

	// The clock stands still: 200 requests, one check.
	flood(200)
	if pings.Load() != 1 || checks.Load() != 1 {
		t.Errorf("200 requests within readyCacheFor: %d pings and %d schema checks, want 1 each", pings.Load(), checks.Load())
	}
	// readyCacheFor later, the answer is renewed.
	clock.Add(int64(readyCacheFor))
	flood(1)
	if pings.Load() != 2 || checks.Load() != 2 {
		t.Errorf("after readyCacheFor: %d pings and %d schema checks, want 2 each", pings.Load(), checks.Load())
	}
	// Each reading of the clock moves it on by readyCacheFor: every
	// request checks again, but never two at once.
	step.Store(int64(readyCacheFor))
	flood(50)
	if pings.Load() != 52 || maxInFlight.Load() != 1 {
		t.Errorf("50 requests with the answer always stale: %d pings in all (want 52), at most %d database checks at once (want 1)", pings.Load(), maxInFlight.Load())
	}
}

package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/relay"
)

// How the relay's statements are planned. pgx prepares every statement, and
// after five runs PostgreSQL may switch a prepared statement to a generic
// plan made once and kept: made while the table is nearly empty, that plan
// can be a sequential scan, and it goes on scanning the whole table as the
// table grows (docs/benchmarks.md measured 100-300 ms per batch). The relay
// asks for a plan per run (plan_cache_mode=force_custom_plan) and no bitmap
// scans: lock claims in their own transaction, lease claims through
// relay.ConfigurePool.

// onePool returns a pool of a single connection to the test database, so
// that the test can read that connection's prepared statements; configure,
// when set, edits its configuration first.
func onePool(t *testing.T, b *bundle, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg := b.pool.Config()
	cfg.MaxConns, cfg.MinConns = 1, 0
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// planCounts maps the first line of each statement prepared on the pool's
// connection that contains marker to its generic and custom plan counts.
func planCounts(t *testing.T, pool *pgxpool.Pool, marker string) map[string][2]int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		"SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE strpos(statement, $1) > 0", marker)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var stmt string
		var generic, custom int64
		if err := rows.Scan(&stmt, &generic, &custom); err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(stmt, "\n")
		c := out[first]
		out[first] = [2]int64{c[0] + generic, c[1] + custom}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// drainInBatches writes and sends n small batches through r, one
// ProcessBatch each.
func drainInBatches(t *testing.T, b *bundle, r *relay.Relay, n int) {
	t.Helper()
	for i := range n {
		b.writeN(3, "plans", fmt.Sprintf("b%d-", i))
		res, err := r.ProcessBatch(b.ctx, 0)
		if err != nil || res.Sent != 3 {
			t.Fatalf("batch %d: %+v, %v; want 3 sent", i, res, err)
		}
	}
}

// assertPlannedEachRun fails unless every statement of counts has only
// custom plans, at least runs of them, and wants are all among them.
func assertPlannedEachRun(t *testing.T, counts map[string][2]int64, runs int64, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if _, ok := counts[want]; !ok {
			t.Errorf("statement %q was not prepared on the connection; prepared: %v", want, counts)
		}
	}
	for stmt, c := range counts {
		if c[0] != 0 || c[1] < runs {
			t.Errorf("%q: %d generic and %d custom plans; want 0 generic and at least %d custom", stmt, c[0], c[1], runs)
		}
	}
}

// A lock claim plans its statements per run even on a pool nobody
// configured: its transaction sets what it needs.
func TestLockClaimPlansEachRun(t *testing.T) {
	b := setup(t)
	pool := onePool(t, b, nil)
	r, err := relay.New(pool, &sink{}, b.config(relay.Config{Claim: relay.ClaimLock}))
	if err != nil {
		t.Fatal(err)
	}
	const runs = 8
	drainInBatches(t, b, r, runs)
	counts := planCounts(t, pool, b.table.Ident())
	assertPlannedEachRun(t, counts, runs,
		"SELECT id, topic, key, payload, headers, least(attempt, 2147483646) + 1, created_at, size FROM (",
		"UPDATE "+b.table.Ident())
	// The settings were the transaction's: the session is as the pool made it.
	var mode string
	if err := pool.QueryRow(b.ctx, "SHOW plan_cache_mode").Scan(&mode); err != nil || mode != "auto" {
		t.Errorf("plan_cache_mode after the claims = %q, %v; want auto (set for the claim's transaction only)", mode, err)
	}
}

// ConfigurePool gives a lease claim's statements a plan per run, and turns
// bitmap scans off; settings the caller made are kept.
func TestConfigurePoolPlansLeaseClaimsEachRun(t *testing.T) {
	b := setup(t)
	pool := onePool(t, b, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["jit"] = "on" // the caller's choice
		relay.ConfigurePool(cfg)
	})
	r, err := relay.New(pool, &sink{}, b.config(relay.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	const runs = 8
	drainInBatches(t, b, r, runs)
	counts := planCounts(t, pool, b.table.Ident())
	// The batches are sent whole: they are marked sent by tuple id
	// (mark_sent_by_tid.sql), by id on a partitioned table.
	markSent := "UPDATE ONLY " + b.table.Ident()
	if testdb.Partitioned() {
		markSent = "UPDATE " + b.table.Ident()
	}
	assertPlannedEachRun(t, counts, runs, "WITH picked AS (", markSent)
	for name, want := range map[string]string{"plan_cache_mode": "force_custom_plan", "enable_bitmapscan": "off", "jit": "on"} {
		var got string
		if err := pool.QueryRow(b.ctx, "SHOW "+name).Scan(&got); err != nil || got != want {
			t.Errorf("SHOW %s = %q, %v; want %q", name, got, err, want)
		}
	}
}

// Run warns, before it logs that it started, when its pool does not set
// the session settings ConfigurePool would, and only then.
func TestRunWarnsWhenThePoolLacksTheSessionSettings(t *testing.T) {
	b := setup(t)
	for _, configured := range []bool{false, true} {
		t.Run(fmt.Sprintf("configured=%v", configured), func(t *testing.T) {
			pool := onePool(t, b, func(cfg *pgxpool.Config) {
				cfg.MaxConns = 8
				if configured {
					relay.ConfigurePool(cfg)
				}
			})
			logs := &messages{started: make(chan struct{})}
			r, err := relay.New(pool, &sink{}, b.config(relay.Config{Logger: slog.New(logs), NoListen: true}))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(b.ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			select {
			case <-logs.started:
			case <-time.After(30 * time.Second):
				t.Fatal("relay did not log that it started within 30s")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			warned := logs.has(slog.LevelWarn, "ConfigurePool")
			if warned == configured {
				t.Errorf("warned about the session settings = %v with a pool configured = %v", warned, configured)
			}
		})
	}
}

// messages is a slog.Handler that keeps the messages logged, and closes
// started at "relay started".
type messages struct {
	mu      sync.Mutex
	logged  []slog.Record
	started chan struct{}
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m *messages) WithGroup(string) slog.Handler            { return m }

func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.logged = append(m.logged, r)
	if r.Message == "relay started" {
		close(m.started)
	}
	return nil
}

// has reports whether a message at level containing text was logged.
func (m *messages) has(level slog.Level, text string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.logged {
		if r.Level == level && strings.Contains(r.Message, text) {
			return true
		}
	}
	return false
}

package testdb

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Plans of the relay's statements, for the tests that hold them to what
// they read.

// ExplainBuffers runs q with args under EXPLAIN (ANALYZE, BUFFERS) in a
// transaction it rolls back, with the relay's enable_bitmapscan (off), and
// returns the plan.
func ExplainBuffers(t testing.TB, pool *pgxpool.Pool, q string, args ...any) Plan {
	t.Helper()
	return ExplainIn(t, pool, []string{"SET LOCAL enable_bitmapscan = off"}, nil, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q, args...)
}

// ExplainIn runs the statements setup, then explain (an EXPLAIN ... FORMAT
// JSON) with args, then teardown, in a transaction it rolls back, and
// returns the plan. setup and teardown go by the simple protocol: they
// have no parameters of their own.
func ExplainIn(t testing.TB, pool *pgxpool.Pool, setup, teardown []string, explain string, args ...any) Plan {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing is kept
	for _, q := range setup {
		if _, err := tx.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var plan []struct{ Plan Plan }
	if err := tx.QueryRow(ctx, explain, args...).Scan(&plan); err != nil {
		t.Fatalf("%s: %v", explain, err)
	}
	if len(plan) != 1 {
		t.Fatalf("EXPLAIN returned %d plans", len(plan))
	}
	for _, q := range teardown {
		if _, err := tx.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return plan[0].Plan
}

// Plan is a node of EXPLAIN (FORMAT JSON).
type Plan struct {
	Type       string  `json:"Node Type"`
	Relation   string  `json:"Relation Name"`
	Loops      int     `json:"Actual Loops"`
	IndexName  string  `json:"Index Name"`
	SharedHit  int     `json:"Shared Hit Blocks"`
	SharedRead int     `json:"Shared Read Blocks"`
	Rows       float64 `json:"Actual Rows"`
	Removed    float64 `json:"Rows Removed by Filter"`
	Plans      []Plan  `json:"Plans"`
}

// Read lists the relations the scans under n read at least once.
func (n Plan) Read() []string {
	var out []string
	if strings.HasSuffix(n.Type, "Scan") && n.Relation != "" && n.Loops > 0 {
		out = append(out, n.Relation)
	}
	for _, c := range n.Plans {
		out = append(out, c.Read()...)
	}
	return out
}

// Pages sums the buffers of the nodes under n that scan an index whose
// name ends with suffix.
func (n Plan) Pages(suffix string) (int, bool) {
	total, found := 0, false
	if n.IndexName != "" && strings.HasSuffix(n.IndexName, suffix) {
		total, found = n.SharedHit+n.SharedRead, true
	}
	for _, c := range n.Plans {
		p, f := c.Pages(suffix)
		total, found = total+p, found || f
	}
	return total, found
}

package pgstore

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// explaining is a batcher for tests: it runs each statement of a batch
// under EXPLAIN (ANALYZE, BUFFERS) first, in tx, and records its plan,
// then sends the batch to tx.
type explaining struct {
	t     *testing.T
	tx    pgx.Tx
	plans []testdb.Plan
	sql   []string
}

func (e *explaining) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	e.t.Helper()
	for _, q := range b.QueuedQueries {
		var out []byte
		if err := e.tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q.SQL, q.Arguments...).Scan(&out); err != nil {
			e.t.Fatalf("explain: %v", err)
		}
		var plan []struct{ Plan testdb.Plan }
		if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
			e.t.Fatalf("explain output %s: %v", out, err)
		}
		e.plans = append(e.plans, plan[0].Plan)
		e.sql = append(e.sql, q.SQL)
	}
	return e.tx.SendBatch(ctx, b)
}

// buffers adds up the shared buffers every statement explained hit or
// read.
func (e *explaining) buffers() int {
	n := 0
	for _, p := range e.plans {
		n += p.SharedHit + p.SharedRead
	}
	return n
}

// claimExplained runs s's ordered claim of limit rows of shard, leased
// to lessee, with the windows w under explaining, in a transaction it
// rolls back.
func claimExplained(t *testing.T, s *Store, shard int, lessee string, limit int, w claimWindows) (store.OrderedClaim, *explaining) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing is kept
	// As ConfigurePool plans the relay's statements.
	if _, err := tx.Exec(ctx, "SET LOCAL enable_bitmapscan = off"); err != nil {
		t.Fatal(err)
	}
	e := &explaining{t: t, tx: tx}
	c, _, err := s.claimOrderedIn(ctx, e, "owner", limit, shard, lessee, nil, w)
	if err != nil {
		t.Fatal(err)
	}
	return c, e
}

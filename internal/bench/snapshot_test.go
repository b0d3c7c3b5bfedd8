package bench

import (
	"context"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
)

// With HoldSnapshot, holdSnapshot leaves a session holding a snapshot (a
// backend_xmin) until release; without it, nothing.
func TestHoldSnapshotHoldsTheHorizonUntilReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.New(t)
	const holding = `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND state = 'idle in transaction' AND backend_xmin IS NOT NULL
		  AND query LIKE '%' || $1 || '%'`
	count := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, holding, table.Ident()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, hold := range []bool{false, true} {
		r := &runner{harness: &harness{cfg: Config{DatabaseURL: testdb.URL(t), HoldSnapshot: hold}}, table: table}
		release, err := r.holdSnapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if hold {
			want = 1
		}
		if n := count(); n != want {
			t.Errorf("HoldSnapshot %v: %d sessions hold a snapshot, want %d", hold, n, want)
		}
		release()
	}
	if n := count(); n != 0 {
		t.Errorf("after release: %d sessions hold a snapshot, want 0", n)
	}
}

package relay

import (
	"context"
	"fmt"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// countingClaims counts the unordered claims a store runs.
type countingClaims struct {
	store.Store
	claims int
}

func (s *countingClaims) Claim(ctx context.Context, owner string, limit int, rg store.ClaimRange, sent []store.SentBatch) ([]store.Row, []int, error) {
	s.claims++
	return s.Store.Claim(ctx, owner, limit, rg, sent)
}

// When every topic is ordered, the unordered claims take keyless rows and
// lapsed leases only: after a claim that took nothing, a worker asks
// whether any is due (due_keyless.sql) and claims only if so. Keyed rows,
// however many, are not due for it; a keyless row or a lapsed lease is.
// With some topics unordered it always claims.
func TestIdleClaimsLookFirstWhenEveryTopicIsOrdered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, table := testdb.New(t)
	r := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "idle", Ordering: Ordering{Topics: []string{"*"}, Shards: 1}})
	counted := &countingClaims{Store: r.pipe.store}
	r.pipe.store = counted // the claims' store
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	write := func(key []byte) {
		t.Helper()
		if _, err := w.WriteBatch(ctx, pool, []outbox.Message{{Topic: "orders", Key: key, Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(want, claims int) {
		t.Helper()
		b, err := r.stream.claim(ctx, ctx, r.tokens.next(), 10)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		if b != nil {
			got = len(b.rows)
		}
		if got != want || counted.claims != claims {
			t.Fatalf("claimed %d rows, %d claims run in all; want %d, %d", got, counted.claims, want, claims)
		}
	}
	for i := range 3 {
		write(fmt.Appendf(nil, "k%d", i))
	}
	claim(0, 1) // keyed rows are the ordered loops'
	claim(0, 1) // nothing due: no claim
	claim(0, 1)

	write(nil) // a keyless row
	claim(1, 2)
	claim(0, 3) // the claim after one that took rows runs
	claim(0, 3)

	// The keyless row's lease lapses.
	if _, err := pool.Exec(ctx, "UPDATE "+table.Ident()+" SET locked_until = now() - interval '1 second' WHERE key IS NULL"); err != nil {
		t.Fatal(err)
	}
	if due, err := r.shards.DueKeyless(ctx); err != nil || !due {
		t.Fatalf("dueKeyless with a lapsed lease = %v, %v; want true", due, err)
	}

	some := quietRelay(t, pool, nopPublisher{}, Config{Table: table, ID: "some", Ordering: Ordering{Topics: []string{"orders"}, Shards: 1}})
	if some.stream.dueKeyless != nil {
		t.Error("with some topics unordered, idle claims look first; want them to claim")
	}
}

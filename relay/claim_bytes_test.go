package relay

import (
	"bytes"
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store/storetest"
)

// insertSized writes the rows of storetest.SizedPayloads with key "k", each in a
// transaction of its own, and returns their ids in order.
func insertSized(t *testing.T, pool *pgxpool.Pool, table outbox.Table) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(storetest.SizedPayloads))
	for i, n := range storetest.SizedPayloads {
		ids[i] = uuid.Must(uuid.NewV7())
		_, err := pool.Exec(context.Background(), "INSERT INTO "+table.Ident()+" (id, topic, key, payload) VALUES ($1, 'orders', 'k', $2)",
			ids[i], bytes.Repeat([]byte("p"), n))
		if err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// Every PostgreSQL claim (lease, lock, ordered) measures its rows in the
// database: it stops at the row at which their bytes reach BatchBytes,
// and returns a row above MaxEventBytes with its size and without its
// payload, key and headers.
func TestClaimsBoundWhatTheyRead(t *testing.T) {
	t.Parallel()
	bounds := Config{BatchBytes: storetest.SizedBounds.Batch, MaxEventBytes: storetest.SizedBounds.Event}
	t.Run("lease", func(t *testing.T) {
		t.Parallel()
		pool, table := testdb.New(t)
		cfg := bounds
		cfg.Table = table
		r := quietRelay(t, pool, nopPublisher{}, cfg)
		ids := insertSized(t, pool, table)
		rows, _, err := r.store.Claim(context.Background(), "test#1", 10, everything, nil)
		if err != nil {
			t.Fatal(err)
		}
		storetest.CheckSizedClaim(t, "the lease claim", ids, rows)
	})
	t.Run("lock", func(t *testing.T) {
		t.Parallel()
		pool, table := testdb.New(t)
		cfg := bounds
		cfg.Table, cfg.Claim = table, ClaimLock
		r := quietRelay(t, pool, nopPublisher{}, cfg)
		ids := insertSized(t, pool, table)
		ctx := context.Background()
		l, err := r.locks.db.ClaimLocked(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		defer l.Rollback(ctx)
		storetest.CheckSizedClaim(t, "the lock claim", ids, l.Rows())
	})
	t.Run("ordered", func(t *testing.T) {
		t.Parallel()
		pool, table := testdb.NewUnpartitioned(t)
		cfg := bounds
		cfg.Table, cfg.Ordering = table, Ordering{Topics: []string{"*"}, Shards: 1}
		r := quietRelay(t, pool, nopPublisher{}, cfg)
		ctx := context.Background()
		if err := r.shards.EnsureShards(ctx, 1); err != nil {
			t.Fatal(err)
		}
		ids := insertSized(t, pool, table)
		testdb.AwaitReady(t, pool, table)
		shard, ok, err := r.shards.LeaseShard(ctx, "lessee")
		if err != nil || !ok {
			t.Fatalf("leaseShard = %v, %v", ok, err)
		}
		claimed, _, err := r.shards.ClaimOrdered(ctx, "owner", 10, shard, "lessee", nil)
		if err != nil {
			t.Fatal(err)
		}
		storetest.CheckSizedClaim(t, "the ordered claim", ids, claimed.Rows)
	})
}

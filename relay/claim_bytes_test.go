package relay

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// sizedPayloads are the payloads the claim bound tests write, in order:
// five of 100 bytes and, third, one of 5,000. With key "k", the bounds
// claimBytes{batch: 350, event: 1000} take the first five: the big row
// counts for nothing, and the bytes before the last one are about 420.
var sizedPayloads = []int{100, 100, 5000, 100, 100, 100}

const sizedBig = 2 // the index of the big row in sizedPayloads

// checkSizedClaim checks a claim of the rows written from sizedPayloads
// (ids): the first five, the big one with its size but without its key,
// payload and headers, the others whole.
func checkSizedClaim(t *testing.T, what string, ids []uuid.UUID, rows []store.Row) {
	t.Helper()
	got := map[uuid.UUID]store.Row{}
	for _, x := range rows {
		got[x.ID] = x
	}
	if len(rows) != 5 {
		t.Errorf("%s took %d rows, want 5: the rows up to the one at which their bytes reach 350", what, len(rows))
	}
	for i, id := range ids {
		x, ok := got[id]
		switch {
		case i == len(ids)-1:
			if ok {
				t.Errorf("%s took the last row, past the batch bound", what)
			}
			continue
		case !ok:
			t.Errorf("%s left row %d behind", what, i)
			continue
		}
		if lo := int64(sizedPayloads[i] + 1); x.Size < lo || x.Size > lo+16 {
			t.Errorf("%s: row %d has size %d, want its payload, key and headers, %d and a few bytes", what, i, x.Size, lo)
		}
		if i == sizedBig {
			if x.Payload != nil || x.Key != nil || x.Headers != nil {
				t.Errorf("%s returned the big row's payload (%d bytes), key %q or headers %q", what, len(x.Payload), x.Key, x.Headers)
			}
			continue
		}
		if !bytes.Equal(x.Payload, bytes.Repeat([]byte("p"), sizedPayloads[i])) || string(x.Key) != "k" || len(x.Headers) == 0 {
			t.Errorf("%s: row %d came back as payload of %d bytes, key %q, headers %q; want it whole", what, i, len(x.Payload), x.Key, x.Headers)
		}
	}
}

// insertSized writes the rows of sizedPayloads with key "k", each in a
// transaction of its own, and returns their ids in order.
func insertSized(t *testing.T, pool *pgxpool.Pool, table outbox.Table) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, len(sizedPayloads))
	for i, n := range sizedPayloads {
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
	bounds := Config{BatchBytes: 350, MaxEventBytes: 1000}
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
		checkSizedClaim(t, "the lease claim", ids, rows)
	})
	t.Run("lock", func(t *testing.T) {
		t.Parallel()
		pool, table := testdb.New(t)
		cfg := bounds
		cfg.Table, cfg.Claim = table, ClaimLock
		r := quietRelay(t, pool, nopPublisher{}, cfg)
		ids := insertSized(t, pool, table)
		ctx := context.Background()
		l, err := pgOf(r).ClaimLocked(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		defer l.Rollback(ctx)
		checkSizedClaim(t, "the lock claim", ids, l.Rows())
	})
	t.Run("ordered", func(t *testing.T) {
		t.Parallel()
		pool, table := testdb.NewUnpartitioned(t)
		cfg := bounds
		cfg.Table, cfg.Ordering = table, Ordering{Topics: []string{"*"}, Shards: 1}
		r := quietRelay(t, pool, nopPublisher{}, cfg)
		ctx := context.Background()
		if err := pgOf(r).EnsureShards(ctx, 1); err != nil {
			t.Fatal(err)
		}
		ids := insertSized(t, pool, table)
		awaitReady(t, pool, table)
		shard, ok, err := pgOf(r).LeaseShard(ctx, "lessee")
		if err != nil || !ok {
			t.Fatalf("leaseShard = %v, %v", ok, err)
		}
		claimed, _, err := pgOf(r).ClaimOrdered(ctx, "owner", 10, shard, "lessee", nil)
		if err != nil {
			t.Fatal(err)
		}
		checkSizedClaim(t, "the ordered claim", ids, claimed.Rows)
	})
}

// The MySQL claim bounds what it reads as PostgreSQL's does: it measures
// the rows it locks, keeps them up to the one at which their bytes reach
// the batch bound, and reads the payload, key and headers of those within
// the event bound only.
func TestMySQLClaimBoundsWhatItReads(t *testing.T) {
	t.Parallel()
	b := setupMySQL(t, time.Minute)
	b.s.bytes = store.Bounds{Batch: 350, Event: 1000}
	ids := make([]uuid.UUID, len(sizedPayloads))
	for i, n := range sizedPayloads {
		ids[i] = uuid.Must(uuid.NewV7())
		b.exec("INSERT INTO outbox (id, topic, `key`, payload, next_retry_at) VALUES (?, 'orders', 'k', ?, UTC_TIMESTAMP(6) - INTERVAL ? SECOND)",
			ids[i][:], bytes.Repeat([]byte("p"), n), len(sizedPayloads)-i)
	}
	rows := b.claim("relay-a#1", 10, everything)
	checkSizedClaim(t, "the MySQL claim", ids, rows)
	for _, id := range ids[:5] {
		if st := b.state(id); st.status != "processing" || st.lockedBy.String != "relay-a#1" {
			t.Errorf("row %s: %+v; want it leased to the claim, the big one too", id, st)
		}
	}
	if st := b.state(ids[5]); st.status != "pending" || st.attempt != 0 {
		t.Errorf("the row past the bound: %+v; want it pending, untouched", st)
	}
}

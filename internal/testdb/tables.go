package testdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// PartitionedWithPending returns a table partitioned by the hour, its
// partitions (the current one and 3 ahead, at least), and n pending rows
// written now, in the current one.
func PartitionedWithPending(t testing.TB, n int) (*pgxpool.Pool, outbox.Table, []migrations.Partition) {
	t.Helper()
	ctx := context.Background()
	pool, table := NewEmpty(t)
	if _, err := migrations.UpWith(ctx, pool, table, migrations.Options{PartitionInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	parts, err := migrations.Partitions(ctx, pool, table)
	if err != nil || len(parts) < 4 {
		t.Fatalf("partitions %v (%v): want the current one and 3 ahead", parts, err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+table.Ident()+" (topic, payload) SELECT 'orders', '\\x00' FROM generate_series(1, $1)", n); err != nil {
		t.Fatal(err)
	}
	return pool, table, parts
}

// InsertPending adds n due pending rows of topic orders to table.
func InsertPending(t testing.TB, pool *pgxpool.Pool, table outbox.Table, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), "INSERT INTO "+table.Ident()+
		` (id, topic, payload) SELECT gen_random_uuid(), 'orders', '\x00' FROM generate_series(1, $1)`, n)
	if err != nil {
		t.Fatal(err)
	}
}

// WriteKeyed writes n events of topic orders over keys keys (k0, k1, ...)
// to table in one transaction, and waits until they are ready for an
// ordered claim (AwaitReady).
func WriteKeyed(t testing.TB, pool *pgxpool.Pool, table outbox.Table, n, keys int) {
	t.Helper()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", Key: fmt.Appendf(nil, "k%d", i%keys), Payload: []byte("x")}
	}
	if _, err := w.WriteBatch(context.Background(), pool, msgs); err != nil {
		t.Fatal(err)
	}
	AwaitReady(t, pool, table)
}

// AwaitReady waits until every row of table is older than every
// transaction still running on the server, as an ordered claim requires
// (relay/internal/pgstore/sql/ordered_head.sql). A transaction another test holds open, in any
// database of the server, keeps the rows written after it from being
// ready until it ends.
func AwaitReady(t testing.TB, pool *pgxpool.Pool, table outbox.Table) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := "SELECT coalesce(max(tx) < pg_snapshot_xmin(pg_current_snapshot()), true) FROM " + table.Ident()
	for {
		var ready bool
		if err := pool.QueryRow(ctx, q).Scan(&ready); err != nil {
			t.Fatalf("await ready rows: %v", err)
		}
		if ready {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("rows not ready after 2 min: a transaction older than them still runs")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// KeysIn returns n keys whose rows fall in bucket (migration 002's
// bucket of a key), in a fixed order.
func KeysIn(t testing.TB, pool *pgxpool.Pool, bucket int16, n int) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT k
		FROM (SELECT 'key-' || g AS k FROM generate_series(1, 200000) AS g) AS c
		WHERE (hashtextextended(encode(convert_to(k, 'UTF8'), 'hex'), 0) & 1023) = $1
		LIMIT $2`, bucket, n)
	if err != nil {
		t.Fatalf("keys of bucket %d: %v", bucket, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) != n {
		t.Fatalf("keys of bucket %d: %v, %v", bucket, keys, err)
	}
	return keys
}

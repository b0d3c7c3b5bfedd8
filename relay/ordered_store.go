package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The statements of ordered delivery (docs/ordering.md). {{shards}} is the
// shard lease table, {{table}} the outbox table.
const (
	shardCountSQL = `SELECT count(*) FROM {{shards}}`

	// shardCreateSQL creates the shard rows once; every replica must agree
	// on their number.
	shardCreateSQL = `INSERT INTO {{shards}} (shard)
SELECT generate_series(0, $1 - 1)
ON CONFLICT DO NOTHING`

	// leaseShardSQL leases a free shard that has work in one of its
	// buckets (bucket % $3 = shard): a due pending row, written by a
	// transaction older than all running ones, or a lapsed claim. Shards
	// whose holder died (lease lapsed, never handed back) come first, then
	// the least recently served. $2 is the lease token, $4/$5 the ordered
	// topics. Pending rows are found through ordered_pending_idx, per
	// bucket: the buckets are an array, not an IN (subquery), so that the
	// planner reads the index per bucket instead of testing every due row
	// per shard. Lapsed claims are found through processing_idx.
	leaseShardSQL = `UPDATE {{shards}} AS s
SET locked_by = $2,
    locked_until = now() + $1 * interval '1 millisecond'
WHERE s.shard = (
    SELECT c.shard
    FROM {{shards}} AS c
    WHERE c.locked_until < now()
      AND (EXISTS (
              SELECT 1
              FROM {{table}} AS o
              WHERE o.bucket = ANY (ARRAY(SELECT generate_series(c.shard, 1023, $3)::smallint))
                AND o.status = 'pending'
                AND o.bucket IS NOT NULL
                AND o.next_retry_at <= now()
                AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
                AND ($4::bool OR o.topic = ANY($5::text[]))
          )
          OR EXISTS (
              SELECT 1
              FROM {{table}} AS o
              WHERE o.status = 'processing'
                AND o.locked_until < now()
                AND o.bucket % $3 = c.shard
                AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
                AND ($4::bool OR o.topic = ANY($5::text[]))
          ))
    ORDER BY c.locked_by IS NULL, c.locked_until, c.shard
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED
)
RETURNING s.shard`

	// handBackSQL returns a shard; locked_until = now() puts it at the end
	// of the least-recently-served order.
	handBackSQL = `UPDATE {{shards}}
SET locked_by = NULL,
    locked_until = now()
WHERE shard = $1
  AND locked_by = $2`

	extendShardSQL = `UPDATE {{shards}}
SET locked_until = now() + $3 * interval '1 millisecond'
WHERE shard = $1
  AND locked_by = $2`

	// claimOrderedSQL claims, in write order, the runs of ready rows at the
	// head of each key in the leased shard's buckets ($6):
	//
	//   - lease re-checks and extends the shard lease in the same statement.
	//     While it holds the shard row's lock another replica's lease
	//     statement skips the shard, and a takeover that got in first makes
	//     the check fail, so two claims of one shard never overlap;
	//   - a bucket's unfinished rows are its pending rows, read through
	//     ordered_pending_idx, and its processing rows, read through
	//     processing_idx (as many as are in flight);
	//   - a row is ready when it is due (pending and next_retry_at passed,
	//     or processing with a lapsed lease) and its writing transaction is
	//     older than every transaction still running, so no earlier write
	//     for its key can still commit;
	//   - a key's rows are claimable up to its first row that is not ready:
	//     a later event never overtakes an earlier one;
	//   - the attempt saturates at the integer limit, as in claimSet.
	claimOrderedSQL = `WITH lease AS (
    UPDATE {{shards}}
    SET locked_until = now() + $3 * interval '1 millisecond'
    WHERE shard = $4
      AND locked_by = $5
      AND locked_until > now()
    RETURNING shard
),
unfinished AS (
    SELECT o.id, o.topic, o.key, o.tx,
           o.next_retry_at <= now()
           AND o.tx < pg_snapshot_xmin(pg_current_snapshot()) AS ready
    FROM {{table}} AS o
    WHERE o.bucket = ANY($6::smallint[])
      AND o.status = 'pending'
      AND o.bucket IS NOT NULL
      AND ($7::bool OR o.topic = ANY($8::text[]))
      AND EXISTS (SELECT 1 FROM lease)
    UNION ALL
    SELECT o.id, o.topic, o.key, o.tx,
           o.locked_until < now()
           AND o.tx < pg_snapshot_xmin(pg_current_snapshot()) AS ready
    FROM {{table}} AS o
    WHERE o.status = 'processing'
      AND o.bucket = ANY($6::smallint[])
      AND ($7::bool OR o.topic = ANY($8::text[]))
      AND EXISTS (SELECT 1 FROM lease)
),
runs AS (
    SELECT id, tx,
           bool_and(ready) OVER (
               PARTITION BY topic, key
               ORDER BY tx, id
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS claimable
    FROM unfinished
),
picked AS (
    SELECT id
    FROM runs
    WHERE claimable
    ORDER BY tx, id
    LIMIT $1
)
UPDATE {{table}} AS o
` + claimSet + `
FROM picked
WHERE o.id = picked.id
  AND o.status IN ('pending', 'processing')
RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.attempt, o.created_at, (o.tx::text)::bigint`
)

// errShardCount means the shard table was made for another Ordering.Shards.
var errShardCount = errors.New("shard count mismatch")

// ensureShards creates the shard rows when there are none, and checks that
// their number is the configured one.
func (s *store) ensureShards(ctx context.Context, shards int) error {
	var n int
	if err := s.pool.QueryRow(ctx, s.sql["shardCount"]).Scan(&n); err != nil {
		return fmt.Errorf("count shards: %w", err)
	}
	if n == 0 {
		if _, err := s.pool.Exec(ctx, s.sql["shardCreate"], shards); err != nil {
			return fmt.Errorf("create shards: %w", err)
		}
		if err := s.pool.QueryRow(ctx, s.sql["shardCount"]).Scan(&n); err != nil {
			return fmt.Errorf("count shards: %w", err)
		}
	}
	if n != shards {
		return fmt.Errorf("%w: the shard table holds %d shards, this relay is configured for %d; every replica must use the same shard count (to change it, stop all replicas and empty the shard table)", errShardCount, n, shards)
	}
	return nil
}

// leaseShard leases a shard with work to owner; ok is false when none is
// free.
func (s *store) leaseShard(ctx context.Context, owner string) (shard int, ok bool, err error) {
	all, topics := s.orderedTopics()
	err = s.pool.QueryRow(ctx, s.sql["leaseShard"], s.lease.Milliseconds(), owner, s.ordering.Shards, all, topics).Scan(&shard)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lease shard: %w", err)
	}
	return shard, true, nil
}

func (s *store) handBack(ctx context.Context, shard int, owner string) error {
	if _, err := s.pool.Exec(ctx, s.sql["handBack"], shard, owner); err != nil {
		return fmt.Errorf("hand back shard %d: %w", shard, err)
	}
	return nil
}

func (s *store) extendShard(ctx context.Context, shard int, owner string) error {
	if _, err := s.pool.Exec(ctx, s.sql["extendShard"], shard, owner, s.lease.Milliseconds()); err != nil {
		return fmt.Errorf("extend shard %d: %w", shard, err)
	}
	return nil
}

// claimOrdered claims up to limit rows of shard for owner, in write order
// per key; lessee is the token of the shard lease.
func (s *store) claimOrdered(ctx context.Context, owner string, limit, shard int, lessee string) ([]row, error) {
	all, topics := s.orderedTopics()
	rows, err := s.pool.Query(ctx, s.sql["claimOrdered"], limit, owner, s.lease.Milliseconds(),
		shard, lessee, bucketsOf(shard, s.ordering.Shards), all, topics)
	if err != nil {
		return nil, fmt.Errorf("claim ordered: %w", err)
	}
	return collectRows(rows, withTx)
}

// bucketsOf lists the buckets of shard: those with bucket % shards = shard.
func bucketsOf(shard, shards int) []int16 {
	var b []int16
	for x := shard; x < Buckets; x += shards {
		b = append(b, int16(x))
	}
	return b
}

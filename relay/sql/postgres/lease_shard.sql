-- lease_shard: leases a free shard that has work in one of its buckets
-- (bucket % $3 = shard): a due pending row, written by a transaction older
-- than all running ones, or a lapsed claim. Shards whose holder died
-- (lease lapsed, never handed back) come first, then the least recently
-- served. $1 is the lease (ms), $2 the lease token, $4/$5 the ordered
-- topics. Pending rows are found through ordered_pending_idx, per bucket:
-- the buckets are an array, not an IN (subquery), so that the planner
-- reads the index per bucket instead of testing every due row per shard.
-- Lapsed claims are found through processing_idx.
UPDATE {{shards}} AS s
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
RETURNING s.shard

-- claim_ordered: claims up to $1 rows for the claim $2 (lease $3 ms), in
-- write order, from the runs of ready rows at the head of each key in the
-- buckets $6 of shard $4, leased by $5; $7/$8 are the ordered topics.
--
--   - lease re-checks and extends the shard lease in the same statement.
--     While it holds the shard row's lock another replica's lease_shard
--     skips the shard, and a takeover that got in first makes the check
--     fail, so two claims of one shard never overlap;
--   - a bucket's unfinished rows are its pending rows, read through
--     ordered_pending_idx, and its processing rows, read through
--     processing_idx (as many as are in flight);
--   - a row is ready when it is due (pending and next_retry_at passed, or
--     processing with a lapsed lease) and its writing transaction is older
--     than every transaction still running, so no earlier write for its
--     key can still commit;
--   - a key's rows are claimable up to its first row that is not ready: a
--     later event never overtakes an earlier one;
--   - the attempt saturates at the integer limit, as in claim.sql.
-- It returns the writing transaction, by which the relay orders the rows.
WITH lease AS (
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
SET status = 'processing',
    locked_by = $2,
    locked_until = now() + $3 * interval '1 millisecond',
    attempt = least(o.attempt, 2147483646) + 1
FROM picked
WHERE o.id = picked.id
  AND o.status IN ('pending', 'processing')
RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.attempt, o.created_at, (o.tx::text)::bigint

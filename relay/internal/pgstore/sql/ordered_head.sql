-- ordered_head: the first read of an ordered claim (docs/ordering.md#the-ordered-claim),
-- which only reads: up to @window of the pending rows of shard @shard
-- (buckets @first_bucket to @last_bucket), its oldest first, below the
-- visibility horizon, and its processing rows of the ordered topics
-- (@all_topics, or those the LIKE patterns @topics match) (in_flight:
-- rows of claims made before migration 009, which marked their rows). A
-- row is ready when it is of an ordered topic and due (pending and
-- next_retry_at passed, or processing with a lapsed lease); the relay
-- computes each key's run of ready rows from them (Store.ClaimOrdered).
-- Each row's tuple id (ctid) tells the take where to fetch it
-- (ordered_take.sql).
--
-- The read starts at the oldest of the buckets' first pending rows of
-- any topic from the shard row's floor_tx, below which no row is pending:
-- one probe of ordered_pending_idx per bucket, then a range scan of
-- ordered_head_idx, the bucket range checked in the index. The start is
-- a row comparison, not tx >= floor, which the planner would pair with
-- tx < horizon into a range it guesses holds 0.5% of the rows and, on a
-- partitioned table, sort every row of the shard instead of merging the
-- partitions' indexes. Tests the index cannot answer (topic, due) are
-- made on the rows read, so that such rows fill the read instead of
-- lengthening it.
--
-- Every row carries seen, the shard row's floor_tx, and floor, the least
-- of where the read started, the oldest processing row of any topic (a
-- row of a topic not ordered here may be sent back to pending and become
-- ordered later) and the horizon (a running transaction may still commit
-- rows): no row of the shard below it can be pending, now or later. The
-- claim's last step writes it (ordered_take.sql). All three come from
-- this statement's one snapshot. When it reads no row, it returns one
-- row with the bounds and NULL for the rest, so that a claim of a drained
-- shard still raises the floor.
WITH shard AS (
    SELECT floor_tx AS seen, coalesce(floor_tx, '0') AS floor_tx
    FROM {{shards}}
    WHERE shard = @shard
),
processing AS (
    SELECT o.bucket, o.id, o.topic, o.key, o.tx, o.ctid,
           o.locked_until < now()
           AND o.tx < pg_snapshot_xmin(pg_current_snapshot()) AS ready,
           @all_topics::bool OR o.topic LIKE ANY(@topics::text[]) AS ordered
    FROM {{table}} AS o
    WHERE o.status = 'processing'
      AND o.bucket BETWEEN @first_bucket AND @last_bucket
),
start AS (
    SELECT f.tx, f.id
    FROM generate_series(@first_bucket::int, @last_bucket::int) AS b (bucket)
    CROSS JOIN LATERAL (
        SELECT o.tx, o.id
        FROM {{table}} AS o
        WHERE o.bucket = b.bucket::smallint
          AND o.status = 'pending'
          AND o.bucket IS NOT NULL
          AND o.tx >= (SELECT floor_tx FROM shard)
        ORDER BY o.tx, o.id
        LIMIT 1
    ) AS f
    ORDER BY f.tx, f.id
    LIMIT 1
),
bounds AS (
    SELECT (SELECT seen FROM shard)::text::bigint AS seen,
           least((SELECT tx FROM start), (SELECT min(tx) FROM processing),
                 pg_snapshot_xmin(pg_current_snapshot()))::text::bigint AS floor
)
SELECT r.bucket, r.id, r.topic, r.key, (r.tx::text)::bigint, r.ready, r.in_flight, r.ctid, b.seen, b.floor
FROM bounds AS b
LEFT JOIN (
    SELECT h.bucket, h.id, h.topic, h.key, h.tx, h.ready, false AS in_flight, h.ctid
    FROM (
        SELECT o.bucket, o.id, o.topic, o.key, o.tx, o.ctid,
               o.next_retry_at <= now()
               AND (@all_topics::bool OR o.topic LIKE ANY(@topics::text[])) AS ready
        FROM {{table}} AS o
        WHERE (o.tx, o.id) >= (SELECT tx, id FROM start)
          AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
          AND o.status = 'pending'
          AND o.key IS NOT NULL
          AND o.bucket BETWEEN @first_bucket AND @last_bucket
        ORDER BY o.tx, o.id
        LIMIT @window
    ) AS h
    UNION ALL
    SELECT bucket, id, topic, key, tx, ready, true, ctid
    FROM processing
    WHERE ordered
) AS r ON true

-- claim_ordered: claims up to $1 rows for the claim $2 (lease $3 ms), in
-- write order, from the runs of ready rows at the head of each key in the
-- buckets $6 (a range, in order) of shard $4, leased by $5; $7/$8 are the
-- ordered topics; $9 is how many of the shard's oldest pending rows it
-- reads first (the first $1 of them before the others), $10 (at most
-- $1) how many of each bucket's it reads next, $11/$12 the bounds on the
-- bytes it returns (at the end), $13 how many rows its last pass reads
-- (only the whole statement takes it: the relay cuts that pass from the
-- others).
--
--   - lease re-checks the shard lease and locks the shard row; noted
--     extends the lease in the same statement. While the lock is held
--     another replica's lease_shard skips the shard, and a takeover that
--     got in first makes the check fail, so two claims of one shard never
--     overlap. Nor do two claims of one holder: it claims again only once
--     the last claim's outcome is written;
--   - a row is ready when it is of an ordered topic, due (pending and
--     next_retry_at passed, or processing with a lapsed lease) and its
--     writing transaction is older than every transaction still running,
--     so no earlier write for its key can still commit;
--   - a key's rows are claimable up to its first row that is not ready: a
--     later event never overtakes an earlier one;
--   - it takes the $1 oldest claimable rows it read, by (tx, id);
--   - the attempt returned saturates at the integer limit, as in claim.sql;
--     the write-back stores it (record_ordered.sql).
-- It returns the writing transaction, by which the relay orders the rows,
-- the tuple id where it read each row, by which record_ordered.sql finds
-- the sent ones, and whether the rows are the shard's oldest pending ones
-- (head_fast, with every topic ordered: $7): once they are all sent, the
-- write-back raises the floor to the last one's transaction.
--
-- What it reads is bounded whatever the backlog holds: at most $9 rows,
-- then $10 of each bucket, then $13 in all, each read a range of an index
-- in (tx, id) order, with every test the index cannot answer (topic, due)
-- made on the rows read, so that rows of other topics or not yet due never
-- lengthen a read. The first rows of the shard in (tx, id) order hold
-- every earlier pending row of each key they hold, and so do the first
-- rows of a bucket, since a key lives in one bucket: the runs computed
-- over them (with the processing rows up to the last row read, from
-- processing_idx: rows of claims made before migration 009, which marked
-- their rows; since then a claim's rows stay pending) are the runs the
-- whole backlog gives, up to that last row (the cut). So whatever it
-- reads, it never takes a row before an earlier one of its key.
-- Rows at or above the visibility horizon are never read: they are not
-- ready, nor is anything after them of their key. The claim reads in up
-- to three passes, each only for what the one before could not decide:
--
--   0. the shard's $9 oldest pending rows, in range scans of
--      ordered_head_idx from the shard's floor (the oldest of its
--      buckets' first rows, of any topic: one probe of
--      ordered_pending_idx per bucket, from the shard row's floor_tx,
--      below which no row is pending), the bucket range checked in the
--      index: the first $1, and the others only when the first are not
--      all claimable (head_fast). It decides the claim when it finds $1
--      claimable rows no later than its cut, or reaches the end of the
--      shard; otherwise the passes below run, bucket by bucket (an empty
--      bucket costs one index probe):
--
--   1. the first $10 pending rows of every bucket (a few more than a
--      bucket's share of $1);
--   2. the buckets whose first pass was full and whose cut comes before
--      the $1-th oldest claimable row found (fewer found: every full
--      bucket), oldest cut first, read again from their start, $13 rows
--      in all: a bucket that holds more than its share of the oldest
--      rows (a hot key's), or whose first rows are not claimable because
--      a key whose head is not ready (waiting for its retry, or in
--      flight) fills them. Reading past that key keeps it from starving
--      the keys behind it in its bucket, up to $13 rows; the index does
--      not order a bucket by key, so the keys written after more than $13
--      rows of a blocked key in their bucket wait until its head is
--      ready. A bucket this pass reads is cut at its last row read when
--      the pass stopped at $13 rows, so that it may end inside any bucket.
--
-- While the first passes find $1 claimable rows no later than their cuts,
-- the claim takes the same rows as a read of every unfinished row of the
-- shard would; otherwise it takes the oldest claimable rows it read.
WITH lease AS (
    SELECT shard, coalesce(floor_tx, '0') AS floor_tx
    FROM {{shards}}
    WHERE shard = $4
      AND locked_by = $5
      AND locked_until > now()
    FOR NO KEY UPDATE
),
-- The rows in flight of every topic, for the floor; of the ordered ones,
-- for the claim.
processing AS (
    SELECT o.bucket, o.id, o.ctid, o.topic, o.key, o.tx,
           o.locked_until < now()
           AND o.tx < pg_snapshot_xmin(pg_current_snapshot()) AS ready,
           $7::bool OR o.topic = ANY($8::text[]) AS ordered
    FROM {{table}} AS o
    WHERE o.status = 'processing'
      AND o.bucket = ANY($6::smallint[])
      AND EXISTS (SELECT 1 FROM lease)
),
inflight AS (
    SELECT bucket, id, ctid, topic, key, tx, ready
    FROM processing
    WHERE ordered
),
-- Pass 0.
head_floor AS (
    SELECT f.tx, f.id
    FROM unnest($6::smallint[]) AS b (bucket)
    CROSS JOIN LATERAL (
        SELECT o.tx, o.id
        FROM {{table}} AS o
        WHERE o.bucket = b.bucket
          AND o.status = 'pending'
          AND o.bucket IS NOT NULL
          AND o.tx >= (SELECT floor_tx FROM lease)
        ORDER BY o.tx, o.id
        LIMIT 1
    ) AS f
    WHERE EXISTS (SELECT 1 FROM lease)
    ORDER BY f.tx, f.id
    LIMIT 1
),
-- The first $1 of them ($9 if fewer). The rows are numbered outside the
-- LIMIT, so that the planner plans the read for that many rows; and the floor is a row
-- comparison, not tx >= floor, which the planner would pair with tx <
-- horizon into a range it guesses holds 0.5% of the rows. With either, on
-- a partitioned table, it sorted every row of the shard instead of
-- merging the partitions' indexes.
head_rows AS (
    SELECT h.bucket, h.id, h.ctid, h.topic, h.key, h.tx, h.ordered, h.ready,
           row_number() OVER (ORDER BY h.tx, h.id) AS n
    FROM (
        SELECT o.bucket, o.id, o.ctid, o.topic, o.key, o.tx,
               $7::bool OR o.topic = ANY($8::text[]) AS ordered,
               o.next_retry_at <= now()
               AND ($7::bool OR o.topic = ANY($8::text[])) AS ready
        FROM {{table}} AS o
        WHERE (o.tx, o.id) >= (SELECT tx, id FROM head_floor)
          AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
          AND o.status = 'pending'
          AND o.key IS NOT NULL
          AND o.bucket BETWEEN ($6::smallint[])[1] AND ($6::smallint[])[cardinality($6::smallint[])]
        ORDER BY o.tx, o.id
        LIMIT least($1::bigint, $9::bigint)
    ) AS h
),
-- When every one of them of an ordered topic is ready and no row is in
-- flight, every one is claimable, and if $1 of them are, or the read
-- ended early (the end of the shard), the claim takes them all and reads
-- nothing more (the common case in a backlog).
head_fast AS (
    SELECT coalesce(bool_and(ready) FILTER (WHERE ordered), true)
           AND NOT EXISTS (SELECT 1 FROM inflight)
           AND (count(*) FILTER (WHERE ordered) >= $1 OR count(*) < least($1::bigint, $9::bigint)) AS fast
    FROM head_rows
),
-- {{runs}}: the relay first runs this statement without the rest of the
-- first pass, up to its end mark (fastOnly in store_postgres.go): in a
-- backlog the first $1 rows decide the claim, and planning what follows
-- costs about a third of the statement's first pass.
-- Otherwise it reads on, up to $9 rows in all, and computes the runs of
-- each key over them.
head_more AS (
    SELECT h.bucket, h.id, h.ctid, h.topic, h.key, h.tx, h.ready,
           $1 + row_number() OVER (ORDER BY h.tx, h.id) AS n
    FROM (
        SELECT o.bucket, o.id, o.ctid, o.topic, o.key, o.tx,
               o.next_retry_at <= now()
               AND ($7::bool OR o.topic = ANY($8::text[])) AS ready
        FROM {{table}} AS o
        WHERE (o.tx, o.id) > (SELECT tx, id FROM head_rows WHERE n = $1)
          AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
          AND o.status = 'pending'
          AND o.key IS NOT NULL
          AND o.bucket BETWEEN ($6::smallint[])[1] AND ($6::smallint[])[cardinality($6::smallint[])]
          AND NOT (SELECT fast FROM head_fast)
        ORDER BY o.tx, o.id
        LIMIT greatest($9 - $1, 0)
    ) AS h
),
head_all AS (
    SELECT bucket, id, ctid, topic, key, tx, ready, n
    FROM head_rows
    UNION ALL
    SELECT bucket, id, ctid, topic, key, tx, ready, n
    FROM head_more
),
head_cut AS (
    SELECT tx, id
    FROM head_all
    WHERE n = $9
),
head_runs AS (
    SELECT k.id, k.ctid, k.tx,
           bool_and(k.ready) OVER (
               PARTITION BY k.topic, k.key
               ORDER BY k.tx, k.id
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS claimable
    FROM (
        SELECT id, ctid, topic, key, tx, ready
        FROM head_all
        UNION ALL
        SELECT i.id, i.ctid, i.topic, i.key, i.tx, i.ready
        FROM inflight AS i
        WHERE NOT EXISTS (
            SELECT 1
            FROM head_cut AS c
            WHERE (c.tx, c.id) < (i.tx, i.id)
        )
    ) AS k
),
head_decided AS (
    SELECT (SELECT fast FROM head_fast)
           OR (SELECT count(*) FROM head_all) < $9
           OR (SELECT count(*) FROM head_runs WHERE claimable) >= $1 AS decided
),
-- {{end of runs}}
-- {{bucket passes}}: passes 1 and 2, which read bucket by bucket when pass
-- 0 did not decide the claim. The relay first runs this statement without
-- them (see headOnly in store_postgres.go), whose planning costs about
-- half as much, and runs it whole only when that takes nothing.
-- Pass 1.
first_rows AS (
    SELECT b.bucket, p.id, p.ctid, p.topic, p.key, p.tx, p.ready, p.n
    FROM unnest($6::smallint[]) AS b (bucket)
    CROSS JOIN LATERAL (
        SELECT o.id, o.ctid, o.topic, o.key, o.tx,
               o.next_retry_at <= now()
               AND ($7::bool OR o.topic = ANY($8::text[])) AS ready,
               row_number() OVER (ORDER BY o.tx, o.id) AS n
        FROM {{table}} AS o
        WHERE o.bucket = b.bucket
          AND o.status = 'pending'
          AND o.bucket IS NOT NULL
          AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY o.tx, o.id
        LIMIT $10
    ) AS p
    WHERE EXISTS (SELECT 1 FROM lease)
      AND NOT (SELECT decided FROM head_decided)
),
first_cut AS (
    SELECT bucket, tx, id
    FROM first_rows
    WHERE n = $10
),
first_runs AS (
    SELECT k.bucket, k.id, k.ctid, k.tx,
           bool_and(k.ready) OVER (
               PARTITION BY k.topic, k.key
               ORDER BY k.tx, k.id
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS claimable
    FROM (
        SELECT bucket, id, ctid, topic, key, tx, ready
        FROM first_rows
        UNION ALL
        SELECT i.bucket, i.id, i.ctid, i.topic, i.key, i.tx, i.ready
        FROM inflight AS i
        WHERE NOT EXISTS (
            SELECT 1
            FROM first_cut AS c
            WHERE c.bucket = i.bucket
              AND (c.tx, c.id) < (i.tx, i.id)
        )
    ) AS k
),
first_edge AS (
    SELECT tx, id
    FROM first_runs
    WHERE claimable
    ORDER BY tx, id
    OFFSET $1 - 1
    LIMIT 1
),
-- Pass 2: the buckets in the order of their cut, each read from its
-- start, $13 rows in all (a nested loop stops at the LIMIT).
second_buckets AS (
    SELECT c.bucket, row_number() OVER (ORDER BY c.tx, c.id) AS turn
    FROM first_cut AS c
    WHERE NOT EXISTS (
        SELECT 1
        FROM first_edge AS e
        WHERE (e.tx, e.id) <= (c.tx, c.id)
    )
),
second_rows AS (
    SELECT b.bucket, p.id, p.ctid, p.topic, p.key, p.tx, p.ready
    FROM (
        SELECT bucket, turn
        FROM second_buckets
        ORDER BY turn
    ) AS b
    CROSS JOIN LATERAL (
        SELECT o.id, o.ctid, o.topic, o.key, o.tx,
               o.next_retry_at <= now()
               AND ($7::bool OR o.topic = ANY($8::text[])) AS ready
        FROM {{table}} AS o
        WHERE o.bucket = b.bucket
          AND o.status = 'pending'
          AND o.bucket IS NOT NULL
          AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
        ORDER BY o.tx, o.id
        LIMIT $13
    ) AS p
    LIMIT $13
),
-- Where the pass stopped at $13 rows, each bucket it read is cut at its
-- last row read; otherwise it read them whole.
second_cut AS (
    SELECT DISTINCT ON (bucket) bucket, tx, id
    FROM second_rows
    WHERE (SELECT count(*) FROM second_rows) >= $13
    ORDER BY bucket, tx DESC, id DESC
),
second_runs AS (
    SELECT k.bucket, k.id, k.ctid, k.tx,
           bool_and(k.ready) OVER (
               PARTITION BY k.topic, k.key
               ORDER BY k.tx, k.id
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
           ) AS claimable
    FROM (
        SELECT bucket, id, ctid, topic, key, tx, ready
        FROM second_rows
        UNION ALL
        SELECT i.bucket, i.id, i.ctid, i.topic, i.key, i.tx, i.ready
        FROM inflight AS i
        WHERE i.bucket IN (SELECT bucket FROM second_rows)
          AND NOT EXISTS (
              SELECT 1
              FROM second_cut AS c
              WHERE c.bucket = i.bucket
                AND (c.tx, c.id) < (i.tx, i.id)
          )
    ) AS k
),
bucket_runs AS (
    SELECT id, ctid, tx
    FROM first_runs
    WHERE claimable
      AND bucket NOT IN (SELECT bucket FROM second_rows)
      AND NOT (SELECT decided FROM head_decided)
    UNION ALL
    SELECT id, ctid, tx
    FROM second_runs
    WHERE claimable
),
-- {{end of bucket passes}}
picked AS (
    SELECT id, ctid
    FROM (
        SELECT id, ctid, tx
        FROM head_rows
        WHERE ordered
          AND (SELECT fast FROM head_fast)
-- {{runs branch}}
        UNION ALL
        SELECT id, ctid, tx
        FROM head_runs
        WHERE claimable
          AND (SELECT decided FROM head_decided)
          AND NOT (SELECT fast FROM head_fast)
-- {{end of runs branch}}
        UNION ALL
        SELECT id, ctid, tx
        FROM bucket_runs
    ) AS c
    ORDER BY tx, id
    LIMIT $1
),
-- The claim writes nothing to the rows it takes: it renews the shard's
-- lease and notes their ids in the shard row, which the outcome's
-- write-back clears (record_ordered.sql), and returns each row with the
-- attempt this publish is. A row of a lapsed claim of a replica before
-- 009 (processing) goes back to pending first, so that the write-back,
-- which takes pending rows only, records it. The new floor_tx is the
-- least of the floor, the oldest row in flight (of any topic, like the
-- floor: a row of a topic not ordered here may be sent back to pending
-- and become ordered later) and the oldest running transaction, whose
-- rows may still commit; relay failed retry and relay replay clear it.
noted AS (
    UPDATE {{shards}}
    SET locked_until = now() + $3 * interval '1 millisecond',
        claimed = nullif(ARRAY(SELECT id FROM picked), '{}'),
        floor_tx = least((SELECT tx FROM head_floor), (SELECT min(tx) FROM processing),
                         pg_snapshot_xmin(pg_current_snapshot()))
    WHERE shard = (SELECT shard FROM lease)
),
revived AS (
    UPDATE {{table}} AS o
    SET status = 'pending',
        locked_by = $2,
        locked_until = NULL
    WHERE o.id = ANY (ARRAY(SELECT p.id FROM picked AS p JOIN inflight AS i ON i.id = p.id))
      AND o.status = 'processing'
)
-- It bounds what it returns as claim.sql does, in write order: rows up
-- to the one at which their sizes reach $11, and a row above $12 without
-- its key, payload and headers. The rows after that one stay pending;
-- the outcome's write-back clears them from the shard row's claimed.
SELECT id, topic,
       CASE WHEN size <= $12 THEN key END,
       CASE WHEN size <= $12 THEN payload END,
       CASE WHEN size <= $12 THEN headers END,
       attempt, created_at, size, tx, tid, prefix
FROM (
    SELECT o.id, o.topic, o.key, o.payload, o.headers,
           least(o.attempt, 2147483646) + 1 AS attempt, o.created_at, s.size,
           (o.tx::text)::bigint AS tx, o.ctid AS tid,
           $7::bool AND (SELECT fast FROM head_fast) AS prefix,
           sum(s.size) FILTER (WHERE s.size <= $12)
               OVER (ORDER BY o.tx, o.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
    FROM {{table}} AS o
    CROSS JOIN LATERAL (
        SELECT octet_length(o.payload) + coalesce(octet_length(o.key), 0) + pg_column_size(o.headers) AS size
    ) AS s
    WHERE o.ctid = ANY (ARRAY(SELECT ctid FROM picked))
      AND o.status IN ('pending', 'processing')
) AS c
WHERE coalesce(before, 0) < $11

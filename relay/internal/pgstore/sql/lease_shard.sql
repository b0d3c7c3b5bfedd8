-- lease_shard: leases to @lessee, for @lease_ms ms, a free shard that has
-- work in one of its buckets (those with bucket * @shards / 1024 = shard,
-- a range; migration 008): a due pending row, written by a transaction
-- older than all running ones, or a lapsed claim. Shards whose holder
-- died (lease lapsed, never handed back) come first, then the least
-- recently served. @all_ordered and @ordered_topics are the ordered
-- topics, as in claim.sql. Pending rows are found
-- through ordered_pending_idx, one probe per bucket: each bucket's look is
-- a LATERAL subquery for its 8 oldest rows below the horizon (ORDER BY the
-- index's columns, LIMIT 8), which the planner cannot turn into a join and
-- answers from the index, so an empty bucket costs one probe. The bucket
-- has work when one of them is due and of an ordered topic, or when it
-- read all 8: the claim decides then. Tests the index cannot answer
-- (topic, due) are made on the rows read, so that a bucket full of rows
-- of other topics or not yet due costs 8 rows, not its whole backlog.
-- Without the LATERAL the planner scanned the table for every candidate
-- shard when its statistics made due rows look common. Lapsed claims are
-- found through processing_idx.
--
-- The free shards are put in that order first (c, kept apart by OFFSET 0
-- so that the looks are not pushed below the sort), and the looks run
-- shard by shard in it, stopping at the first shard with work: in a
-- backlog, one shard's look, where looking at every free shard before
-- sorting them cost several times more (BenchmarkOrderedCycle). Only the shard taken is locked, by the
-- LATERAL sub-select, after its look: a shard locked by another lease
-- under way is passed over (SKIP LOCKED) for the next one with work, and
-- a lease that finds no work locks nothing, so an idle relay writes
-- nothing. The order is the nested loop's, which reads c in its order.
--
-- The rows still noted as claimed in the shard row (ordered_take.sql)
-- were claimed by a holder that wrote no outcome for them: it died,
-- abandoned their publish, or could not write. Their attempt is counted
-- here, as a claim that marks rows processing counts it when it claims,
-- so that a row whose publish kills every relay that tries it still
-- reaches MaxAttempts and fails instead of blocking its key for ever.
WITH taken AS (
    SELECT s.shard, s.claimed
    FROM (
        SELECT shard, floor_tx
        FROM {{shards}}
        WHERE locked_until < now()
        ORDER BY locked_by IS NULL, locked_until, shard
        OFFSET 0
    ) AS c
    CROSS JOIN LATERAL (
        SELECT x.shard, x.claimed
        FROM {{shards}} AS x
        WHERE x.shard = c.shard
          AND x.locked_until < now()
        FOR UPDATE SKIP LOCKED
    ) AS s
    WHERE (EXISTS (
              SELECT 1
              -- the shard's range, as relay.bucketsOf gives it
              FROM generate_series((c.shard * 1024 + @shards - 1) / @shards,
                                   ((c.shard + 1) * 1024 + @shards - 1) / @shards - 1) AS b (bucket)
              CROSS JOIN LATERAL (
                  SELECT o.next_retry_at <= now()
                         AND (@all_ordered::bool OR o.topic LIKE ANY(@ordered_topics::text[])) AS due,
                         row_number() OVER (ORDER BY o.tx, o.id) AS n
                  FROM {{table}} AS o
                  WHERE o.bucket = b.bucket::smallint
                    AND o.status = 'pending'
                    AND o.bucket IS NOT NULL
                    AND o.tx >= coalesce(c.floor_tx, '0')
                    AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
                  ORDER BY o.tx, o.id
                  LIMIT 8
              ) AS head
              WHERE head.due
                 OR head.n = 8
          )
          OR EXISTS (
              SELECT 1
              FROM {{table}} AS o
              WHERE o.status = 'processing'
                AND o.locked_until < now()
                AND o.bucket * @shards / 1024 = c.shard
                AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
                AND (@all_ordered::bool OR o.topic LIKE ANY(@ordered_topics::text[]))
          ))
    LIMIT 1
),
counted AS (
    UPDATE {{table}} AS o
    SET attempt = least(o.attempt, 2147483646) + 1
    WHERE o.id = ANY ((SELECT claimed FROM taken)::uuid[])
      AND (o.status = 'pending') IS TRUE
)
UPDATE {{shards}} AS s
SET locked_by = @lessee,
    locked_until = now() + @lease_ms * interval '1 millisecond',
    claimed = NULL
FROM taken AS t
WHERE s.shard = t.shard
RETURNING s.shard

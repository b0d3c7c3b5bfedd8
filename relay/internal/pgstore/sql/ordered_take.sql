-- ordered_take: the last step of an ordered claim
-- (docs/ordering.md#the-ordered-claim): takes the rows @ids (in write
-- order, every id between @lo and @hi) for the claim @owner, when
-- @lessee still holds shard @shard's lease. It writes nothing to the
-- rows: it renews the shard's lease by @lease_ms, notes the ids in the
-- shard row's claimed (the write-back, record_ordered.sql, clears them;
-- the next lease counts the attempt of those it did not) and sets the
-- floor to @floor, the one the claim's first read found
-- (ordered_head.sql), unless the floor changed since that read (@seen):
-- relay failed retry and relay replay clear it when they make rows
-- pending below it, and a cleared floor stays cleared. The rows @revive,
-- of a lapsed claim before migration 009 (processing), go back to
-- pending, so that the write-back, which takes pending rows only,
-- records them.
--
-- It returns each row with the attempt this publish is (saturating at
-- the integer limit, as in claim.sql), its writing transaction, by which
-- the relay orders the rows, and the tuple id where it read it, by which
-- record_ordered.sql finds the sent ones. It bounds what it returns as
-- claim.sql does, in write order: rows up to the one at which their
-- sizes reach @batch_bytes, and a row above @event_bytes without its
-- key, payload and headers (the relay fails it unread). The rows after
-- that one stay pending. If the lease is not @lessee's, it writes and
-- returns nothing. On a plain table (@by_tid) the rows are fetched at the
-- tuple ids @tids where the read saw them, a TID scan that probes no
-- index (the ids through a sub-select, as in mark_sent_by_tid.sql), and kept only if their id is still one of @ids: a row updated
-- since the read (relay failed retry, relay replay) has moved, is not
-- returned, and cuts the claim. On a partitioned table, where a tuple id
-- names a row in each partition, they go by primary key, the id range
-- pruning the partitions, through a sub-select so that the planner does
-- not count them and read a small table whole. Custom plans fold the CASE
-- (claim.sql).
WITH noted AS (
    UPDATE {{shards}}
    SET locked_until = now() + @lease_ms * interval '1 millisecond',
        claimed = nullif(@ids::uuid[], '{}'),
        floor_tx = CASE
            WHEN floor_tx IS NOT DISTINCT FROM (@seen::bigint)::text::xid8
            THEN coalesce((@floor::bigint)::text::xid8, floor_tx)
            ELSE floor_tx
        END
    WHERE shard = @shard
      AND locked_by = @lessee
      AND locked_until > now()
    RETURNING shard
),
revived AS (
    UPDATE {{table}} AS o
    SET status = 'pending',
        locked_by = @owner,
        locked_until = NULL
    WHERE o.id = ANY (@revive::uuid[])
      AND o.status = 'processing'
      AND EXISTS (SELECT 1 FROM noted)
)
SELECT id, topic,
       CASE WHEN size <= @event_bytes THEN key END,
       CASE WHEN size <= @event_bytes THEN payload END,
       CASE WHEN size <= @event_bytes THEN headers END,
       attempt, created_at, size, tx, tid
FROM (
    SELECT o.id, o.topic, o.key, o.payload, o.headers,
           least(o.attempt, 2147483646) + 1 AS attempt, o.created_at, s.size,
           (o.tx::text)::bigint AS tx, o.ctid AS tid,
           sum(s.size) FILTER (WHERE s.size <= @event_bytes)
               OVER (ORDER BY o.tx, o.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
    FROM {{table}} AS o
    CROSS JOIN LATERAL (
        SELECT octet_length(o.payload) + coalesce(octet_length(o.key), 0) + pg_column_size(o.headers) AS size
    ) AS s
    WHERE CASE WHEN @by_tid::bool
               THEN o.ctid = ANY (ARRAY(SELECT unnest(@tids::tid[]))) AND o.tableoid = '{{table}}'::regclass AND o.id = ANY (@ids::uuid[])
               ELSE o.id = ANY (ARRAY(SELECT unnest(@ids::uuid[]))) AND o.id BETWEEN @lo AND @hi
          END
      AND o.status IN ('pending', 'processing')
      AND EXISTS (SELECT 1 FROM noted)
) AS c
WHERE coalesce(before, 0) < @batch_bytes

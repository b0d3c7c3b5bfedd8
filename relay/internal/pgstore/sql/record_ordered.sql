-- record_ordered: writes the outcome of the ordered claim @owner of shard
-- @shard, leased by @lessee: the rows @sent were sent, each storing the
-- attempt the claim returned. Every id lies between @lo and @hi (see
-- mark_sent.sql). @unknown are the claimed rows whose publish has no
-- outcome (abandoned): they stay noted in the shard row, so that the next
-- lease of the shard counts their attempt (lease_shard.sql); the others
-- are cleared from it. @tids are where the claim read its rows. Rows
-- released untouched are not passed: the claim left them pending, as they
-- stay. Retried and failed rows are record_ordered_retried.sql's, which
-- the relay queues after this one, in the same transaction, when there
-- are any. It returns how many rows it marked sent.
--
-- @raise, when not NULL, is the transaction of the last of the claim's
-- rows, which were the shard's oldest pending rows of every topic and
-- were all sent: none of the shard's rows below it is pending any more,
-- and the floor rises to it, so that the next claim's and lease's probes
-- start past the rows just sent instead of walking their index entries.
-- A floor that is NULL stays NULL: relay failed retry or relay replay
-- cleared it since the claim, having made rows pending below it.
--
-- It is fenced by the shard lease, not by the rows: it writes nothing once
-- another replica holds the shard, which claims the rows again (their
-- attempt counted by its lease). While it runs it holds the shard row's
-- lock, so a takeover waits for it and then sees its outcome. The status
-- test is written as in mark_sent.sql, for the same reason: pending_idx
-- is no way to find a few rows by id.
--
-- Sent rows, nearly all of them, are found by their tuple ids, a TID scan
-- with no primary-key look-up per row (as mark_sent_by_tid.sql; the ids
-- go through a sub-select so that the planner does not count them and
-- read a small table whole). The claim wrote nothing to them, so a sent
-- row is normally where the claim read it. The id test picks the sent
-- rows among those the claim read, and keeps a tuple id from naming
-- another row. A sent row found elsewhere (the claim revived it from a
-- claim before migration 009, which gives it a new version, or something
-- updated it since) is marked in the same statement by primary key: all
-- the sent rows are marked or none, so a key's earlier event never stays
-- pending behind a later one marked sent. The second update runs only
-- when the first marked fewer rows than @sent holds (nearly never), reads
-- only the ids the first missed, and never a row the first updated. On a
-- partitioned table, where a tuple id names a row in each partition, ONLY
-- keeps the first update off every partition and every sent row goes by
-- primary key, found by "id = ANY" alone, as in mark_sent.sql.
WITH lease AS (
    UPDATE {{shards}}
    SET claimed = nullif(@unknown::uuid[], '{}'),
        floor_tx = CASE
            WHEN floor_tx IS NOT NULL AND @raise::bigint IS NOT NULL
            THEN greatest(floor_tx, (@raise::bigint)::text::xid8)
            ELSE floor_tx
        END
    WHERE shard = @shard
      AND locked_by = @lessee
    RETURNING shard
),
sent_here AS (
    UPDATE ONLY {{table}} AS o
    SET status = 'sent',
        sent_at = now(),
        attempt = least(o.attempt, 2147483646) + 1,
        last_error = NULL,
        locked_by = @owner,
        locked_until = NULL
    WHERE o.ctid = ANY (ARRAY(SELECT unnest(@tids::tid[])))
      AND (o.id = ANY (@sent::uuid[])) IS TRUE
      AND (o.status = 'pending') IS TRUE
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING o.id
),
sent_moved AS (
    UPDATE {{table}} AS o
    SET status = 'sent',
        sent_at = now(),
        attempt = least(o.attempt, 2147483646) + 1,
        last_error = NULL,
        locked_by = @owner,
        locked_until = NULL
    WHERE (SELECT count(*) FROM sent_here) < cardinality(@sent::uuid[])
      AND o.id = ANY (ARRAY(SELECT unnest(@sent::uuid[]) EXCEPT SELECT id FROM sent_here))
      AND o.id BETWEEN @lo AND @hi
      AND (o.status = 'pending') IS TRUE
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING 1
)
SELECT (SELECT count(*) FROM sent_here) + (SELECT count(*) FROM sent_moved)

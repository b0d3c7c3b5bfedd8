-- record_ordered: writes the outcome of an ordered claim $3 of shard $1,
-- leased by $2, in one statement: the rows $4 were sent; the rows $5 are
-- retried after $6 ms with the error $7, their attempt less the refund
-- $8 (1 when the sink was down and the message was not at fault); the
-- rows $9 failed with the error $10. Each row stores the attempt the claim
-- returned (less a refund). Every id lies between $11 and $12 (see
-- mark_sent.sql). $13 are the claimed rows whose publish has no outcome
-- (abandoned): they stay noted in the shard row, so that the next lease of
-- the shard counts their attempt (lease_shard.sql); the others are
-- cleared from it. $14 are the tuple ids where the claim read its rows
-- (none on a partitioned table); the sent rows are those of them whose id
-- is in $4. Rows released untouched are not passed:
-- the claim left them pending, as they stay. It returns how many rows it
-- wrote of each.
--
-- $15, when not NULL, is the transaction of the last of the claim's rows,
-- which were the shard's oldest pending rows of every topic (the claim
-- said so) and were all sent: none of the shard's rows below it is pending
-- any more, and the floor (claim_ordered.sql) rises to it, so that the
-- next claim's and lease's probes start past the rows just sent instead of
-- walking their index entries. A floor that is NULL stays NULL: relay
-- failed retry or relay replay cleared it since the claim, having made
-- rows pending below it.
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
-- another row (one written where a row was after a table rewrite). A sent row found elsewhere (the claim revived it from a
-- claim before migration 009, which gives it a new version, or something
-- updated it since) is marked in the same statement by primary key: all
-- the sent rows are marked or none, so a key's earlier event never stays
-- pending behind a later one marked sent. The second update runs only
-- when the first marked fewer rows than $4 holds (nearly never), reads
-- only the ids the first missed, and never a row the first updated. On a partitioned table $14 is empty (a tuple id names
-- a row in each partition; ONLY keeps the first update off every
-- partition) and every sent row goes by primary key.
--
-- By primary key, the ids are found by "id = ANY" alone, as in
-- mark_sent.sql. Joined to their unnested ids the planner chose, on a
-- table of 1,000,000 rows, a nested loop that compared every id with
-- every row (57 ms for 500 rows), and on a table of 200,000 a merge with
-- every row between the least and greatest id. Retried and failed rows,
-- a few per batch, keep the join, since their values differ by row, and
-- name their own ids by "= ANY" as well. With statistics that count few
-- pending rows, the planner estimated the id range, which spans the whole
-- claim, at one row, and read it in the primary key to join the ids to
-- each row (4,056 rows read, twice, for empty lists, on a table of
-- 1,000,000), or read the whole table for 250 retried rows
-- (TestOrderedWriteBackLooksUpRetriedRowsByID).
WITH lease AS (
    UPDATE {{shards}}
    SET claimed = nullif($13::uuid[], '{}'),
        floor_tx = CASE
            WHEN floor_tx IS NOT NULL AND $15::bigint IS NOT NULL
            THEN greatest(floor_tx, ($15::bigint)::text::xid8)
            ELSE floor_tx
        END
    WHERE shard = $1
      AND locked_by = $2
    RETURNING shard
),
sent_here AS (
    UPDATE ONLY {{table}} AS o
    SET status = 'sent',
        sent_at = now(),
        attempt = least(o.attempt, 2147483646) + 1,
        last_error = NULL,
        locked_by = $3,
        locked_until = NULL
    WHERE o.ctid = ANY (ARRAY(SELECT unnest($14::tid[])))
      AND (o.id = ANY ($4::uuid[])) IS TRUE
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
        locked_by = $3,
        locked_until = NULL
    WHERE (SELECT count(*) FROM sent_here) < cardinality($4::uuid[])
      AND o.id = ANY (ARRAY(SELECT unnest($4::uuid[]) EXCEPT SELECT id FROM sent_here))
      AND o.id BETWEEN $11 AND $12
      AND (o.status = 'pending') IS TRUE
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING 1
),
-- {{retried and failed}}: the relay leaves these two out when the outcome
-- has neither (sentOnly in store_postgres.go): it is nearly always so,
-- and planning them costs about as much as the rest of the statement.
retried AS (
    UPDATE {{table}} AS o
    SET next_retry_at = now() + r.delay_ms * interval '1 millisecond',
        attempt = least(o.attempt, 2147483646) + 1 - r.refund,
        last_error = r.error,
        locked_by = $3,
        locked_until = NULL
    FROM unnest($5::uuid[], $6::bigint[], $7::text[], $8::int[]) AS r (id, delay_ms, error, refund)
    WHERE o.id = r.id
      AND o.id = ANY ($5::uuid[])
      AND o.id BETWEEN $11 AND $12
      AND (o.status = 'pending') IS TRUE
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING 1
),
failed AS (
    UPDATE {{table}} AS o
    SET status = 'failed',
        failed_at = now(),
        attempt = least(o.attempt, 2147483646) + 1,
        last_error = r.error,
        locked_by = $3,
        locked_until = NULL
    FROM unnest($9::uuid[], $10::text[]) AS r (id, error)
    WHERE o.id = r.id
      AND o.id = ANY ($9::uuid[])
      AND o.id BETWEEN $11 AND $12
      AND (o.status = 'pending') IS TRUE
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING 1
)
-- {{end of retried and failed}}
SELECT (SELECT count(*) FROM sent_here) + (SELECT count(*) FROM sent_moved),
       (SELECT count(*) FROM retried),
       (SELECT count(*) FROM failed)

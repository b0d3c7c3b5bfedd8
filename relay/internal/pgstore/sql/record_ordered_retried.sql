-- record_ordered_retried: writes the retried and failed rows of the
-- outcome of the ordered claim @owner of shard @shard, leased by @lessee
-- (record_ordered.sql writes the sent ones, first, in the same
-- transaction): the rows @retried are retried after @delays ms with the
-- errors @errors, their attempt less the refunds @refunds (1 when the
-- sink was down and the message was not at fault); the rows @failed
-- failed with the errors @fail_errors. Each stores the attempt the claim
-- returned (less a refund). Every id lies between @lo and @hi. It writes
-- nothing once @lessee no longer holds the shard, and returns how many
-- rows it retried and failed.
--
-- Retried and failed rows, a few per batch, are joined to their values
-- and name their own ids by "= ANY" as well: with statistics that count
-- few pending rows, the planner estimated the id range, which spans the
-- whole claim, at one row, and read it in the primary key to join the ids
-- to each row, or read the whole table for 250 retried rows
-- (TestOrderedWriteBackLooksUpRetriedRowsByID).
WITH lease AS (
    SELECT shard
    FROM {{shards}}
    WHERE shard = @shard
      AND locked_by = @lessee
),
retried AS (
    UPDATE {{table}} AS o
    SET next_retry_at = now() + r.delay_ms * interval '1 millisecond',
        attempt = least(o.attempt, 2147483646) + 1 - r.refund,
        last_error = r.error,
        locked_by = @owner,
        locked_until = NULL
    FROM unnest(@retried::uuid[], @delays::bigint[], @errors::text[], @refunds::int[]) AS r (id, delay_ms, error, refund)
    WHERE o.id = r.id
      AND o.id = ANY (@retried::uuid[])
      AND o.id BETWEEN @lo AND @hi
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
        locked_by = @owner,
        locked_until = NULL
    FROM unnest(@failed::uuid[], @fail_errors::text[]) AS r (id, error)
    WHERE o.id = r.id
      AND o.id = ANY (@failed::uuid[])
      AND o.id BETWEEN @lo AND @hi
      AND (o.status = 'pending') IS TRUE
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING 1
)
SELECT (SELECT count(*) FROM retried),
       (SELECT count(*) FROM failed)

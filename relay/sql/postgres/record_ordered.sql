-- record_ordered: writes the outcome of an ordered claim $3 of shard $1,
-- leased by $2, in one statement: row $4[i] becomes $5[i] ('sent',
-- 'failed', or 'pending' to retry after $6[i] ms), with the error $7[i] ('' for none),
-- and stores the attempt the claim returned less the refund $8[i] (1 when
-- the sink was down and the message not at fault). The ids lie between $9
-- and $10 (see mark_sent.sql). $11 are the claimed rows whose publish has
-- no outcome (abandoned): they stay noted in the shard row, so that the
-- next lease of the shard counts their attempt (lease_shard.sql); the
-- others are cleared from it. Rows released untouched are not passed:
-- the claim left them pending, as they stay.
--
-- It is fenced by the shard lease, not by the rows: it writes nothing once
-- another replica holds the shard, which claims the rows again (their
-- attempt counted by its lease). While it runs it holds the shard row's
-- lock, so a takeover waits for it and then sees its outcome. The status
-- test is written as in mark_sent.sql, for the same reason: pending_idx
-- is no way to find a few rows by id. "id = ANY" beside the join makes
-- the rows primary-key look-ups; without it the planner merged the ids
-- with a scan of every row between the least and the greatest, about as
-- many as the shards.
WITH lease AS (
    UPDATE {{shards}}
    SET claimed = CASE WHEN cardinality($11::uuid[]) > 0 THEN $11::uuid[] END
    WHERE shard = $1
      AND locked_by = $2
    RETURNING shard
)
UPDATE {{table}} AS o
SET status = r.status,
    sent_at = CASE WHEN r.status = 'sent' THEN now() ELSE o.sent_at END,
    failed_at = CASE WHEN r.status = 'failed' THEN now() ELSE o.failed_at END,
    next_retry_at = CASE
        WHEN r.status = 'pending' THEN now() + r.delay_ms * interval '1 millisecond'
        ELSE o.next_retry_at
    END,
    attempt = least(o.attempt, 2147483646) + 1 - r.refund,
    last_error = nullif(r.error, ''),
    locked_by = $3,
    locked_until = NULL
FROM unnest($4::uuid[], $5::text[], $6::bigint[], $7::text[], $8::int[])
    AS r (id, status, delay_ms, error, refund)
WHERE o.id = ANY ($4::uuid[])
  AND o.id = r.id
  AND o.id BETWEEN $9 AND $10
  AND (o.status = 'pending') IS TRUE
  AND EXISTS (SELECT 1 FROM lease)
RETURNING r.status

-- locked_retry: mark_retry.sql for a lock claim (see locked_sent.sql).
-- The ids are named by "= ANY" besides the join, as in mark_retry.sql.
UPDATE {{table}} AS o
SET status = 'pending',
    next_retry_at = now() + r.delay_ms * interval '1 millisecond',
    attempt = least(o.attempt, 2147483646) + 1 - r.refund,
    last_error = r.error,
    locked_by = @owner,
    locked_until = NULL
FROM unnest(@ids::uuid[], @delays::bigint[], @errors::text[], @refunds::int[]) AS r(id, delay_ms, error, refund)
WHERE o.id = r.id
  AND o.id = ANY (@ids::uuid[])

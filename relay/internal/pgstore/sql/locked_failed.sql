-- locked_failed: mark_failed.sql for a lock claim (see locked_sent.sql).
-- The ids are named by "= ANY" besides the join, as in mark_failed.sql.
UPDATE {{table}} AS o
SET status = 'failed',
    attempt = least(o.attempt, 2147483646) + 1,
    last_error = r.error,
    failed_at = now(),
    locked_by = @owner,
    locked_until = NULL
FROM unnest(@ids::uuid[], @errors::text[]) AS r(id, error)
WHERE o.id = r.id
  AND o.id = ANY (@ids::uuid[])

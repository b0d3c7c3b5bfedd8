-- locked_failed: mark_failed.sql for a lock claim (see locked_sent.sql).
UPDATE {{table}} AS o
SET status = 'failed',
    attempt = least(o.attempt, 2147483646) + 1,
    last_error = r.error,
    failed_at = now(),
    locked_by = $3,
    locked_until = NULL
FROM unnest($1::uuid[], $2::text[]) AS r(id, error)
WHERE o.id = r.id

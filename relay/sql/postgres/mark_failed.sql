-- mark_failed: rows failed for good, each with its reason, and when
-- (failed_at, migration 007). Fenced by the claim $3.
UPDATE {{table}} AS o
SET status = 'failed',
    failed_at = now(),
    last_error = r.error,
    locked_until = NULL
FROM unnest($1::uuid[], $2::text[]) AS r(id, error)
WHERE o.id = r.id
  AND o.locked_by = $3
  AND o.status = 'processing'

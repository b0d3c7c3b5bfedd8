-- failed_retry: puts the failed rows {{ids}} that failed_pick.sql locked
-- back to pending: due at once, attempt 0, failed_at cleared, last_error
-- kept (first parameter false) or cleared (true). Fenced by state all the
-- same: no other state is ever touched.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'pending',
    attempt = 0,
    next_retry_at = UTC_TIMESTAMP(6),
    locked_until = NULL,
    failed_at = NULL,
    last_error = CASE WHEN ? THEN NULL ELSE last_error END
WHERE id IN ({{ids}})
  AND status = 'failed'

-- mark_failed: rows failed for good, each with its reason ({{cases}}:
-- "WHEN id THEN error" for every row), and when. Fenced by the claim (the
-- last parameter).
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'failed',
    failed_at = UTC_TIMESTAMP(6),
    last_error = (CASE id {{cases}} END),
    locked_until = NULL
WHERE id IN ({{ids}})
  AND locked_by = ?
  AND status = 'processing'

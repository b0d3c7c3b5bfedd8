-- release: rows {{ids}} go back without spending the attempt: claimable at
-- once (next_retry_at was already due when claimed). Fenced by the claim
-- (the last parameter).
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'pending',
    attempt = attempt - 1,
    locked_until = NULL
WHERE id IN ({{ids}})
  AND locked_by = ?
  AND status = 'processing'

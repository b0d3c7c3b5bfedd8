-- release: rows $1 go back without spending the attempt: claimable at
-- once (next_retry_at was already due when claimed). Fenced by the claim $2.
UPDATE {{table}}
SET status = 'pending',
    attempt = attempt - 1,
    locked_until = NULL
WHERE id = ANY($1)
  AND locked_by = $2
  AND status = 'processing'

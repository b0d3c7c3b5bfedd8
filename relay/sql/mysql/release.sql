-- release: rows $1 (a JSON array of hex ids) go back without spending the
-- attempt: claimable at once (next_retry_at was already due when
-- claimed). Fenced by the claim $2.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) PATH '$')) AS j
STRAIGHT_JOIN {{table}} AS o FORCE INDEX (PRIMARY) ON o.id = UNHEX(j.id)
SET o.status = 'pending',
    o.attempt = o.attempt - 1,
    o.locked_until = NULL
WHERE o.locked_by = ?
  AND o.status = 'processing'

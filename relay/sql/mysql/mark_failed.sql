-- mark_failed: rows failed for good, each with its reason, and when. $1
-- is a JSON array of {"id": hex, "error": text}. Fenced by the claim $2.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
           id    CHAR(32) PATH '$.id',
           error LONGTEXT PATH '$.error')) AS r
STRAIGHT_JOIN {{table}} AS o FORCE INDEX (PRIMARY) ON o.id = UNHEX(r.id)
SET o.status = 'failed',
    o.failed_at = UTC_TIMESTAMP(6),
    o.last_error = r.error,
    o.locked_until = NULL
WHERE o.locked_by = ?
  AND o.status = 'processing'

-- mark_retry: rows go back to pending until their delay (ms) has passed,
-- by the database clock. $1 is a JSON array of
-- {"id": hex, "delay_ms": n, "error": text, "refund": 0 or 1}; a refund of
-- 1 gives the attempt back (the sink was down, the message was not at
-- fault). Fenced by the claim $2.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
           id       CHAR(32) PATH '$.id',
           delay_ms BIGINT   PATH '$.delay_ms',
           error    LONGTEXT PATH '$.error',
           refund   INT      PATH '$.refund')) AS r
STRAIGHT_JOIN {{table}} AS o FORCE INDEX (PRIMARY) ON o.id = UNHEX(r.id)
SET o.status = 'pending',
    o.next_retry_at = UTC_TIMESTAMP(6) + INTERVAL r.delay_ms * 1000 MICROSECOND,
    o.attempt = o.attempt - r.refund,
    o.last_error = r.error,
    o.locked_until = NULL
WHERE o.locked_by = ?
  AND o.status = 'processing'

-- mark_retry: rows go back to pending until their delay (ms) has passed,
-- by the database clock. Each {{cases}} is "WHEN id THEN value" for every
-- row: its delay, its refund (1 gives the attempt back: the sink was down,
-- the message was not at fault) and its error. Fenced by the claim (the
-- last parameter).
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'pending',
    next_retry_at = UTC_TIMESTAMP(6) + INTERVAL (CASE id {{cases}} END) * 1000 MICROSECOND,
    attempt = attempt - (CASE id {{cases}} END),
    last_error = (CASE id {{cases}} END),
    locked_until = NULL
WHERE id IN ({{ids}})
  AND locked_by = ?
  AND status = 'processing'

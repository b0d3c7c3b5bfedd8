-- record_ordered_retried: the rows {{ids}} of an ordered claim are
-- retried after the delays (ms) of the first CASE, less the refund (0 or
-- 1) of the second, with the errors of the third; by claim ?.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET next_retry_at = UTC_TIMESTAMP(6) + INTERVAL (CASE id {{cases}} END) * 1000 MICROSECOND,
    attempt = LEAST(attempt, 2147483646) + 1 - (CASE id {{cases}} END),
    last_error = (CASE id {{cases}} END),
    locked_by = ?,
    locked_until = NULL
WHERE id IN ({{ids}})
  AND status = 'pending'

-- record_ordered_failed: the rows {{ids}} of an ordered claim failed with
-- the errors of the CASE (a parked head's starts with "parked:"); by
-- claim ?.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'failed',
    failed_at = UTC_TIMESTAMP(6),
    attempt = LEAST(attempt, 2147483646) + 1,
    last_error = (CASE id {{cases}} END),
    locked_by = ?,
    locked_until = NULL
WHERE id IN ({{ids}})
  AND status = 'pending'

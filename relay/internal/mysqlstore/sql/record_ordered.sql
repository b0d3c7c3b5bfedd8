-- record_ordered: the rows {{ids}} of an ordered claim were sent; the
-- claim ? records it. Fenced by the shard lease (shard_held.sql, in the
-- same transaction), not by the rows, which the claim left pending.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'sent',
    sent_at = UTC_TIMESTAMP(6),
    attempt = LEAST(attempt, 2147483646) + 1,
    last_error = NULL,
    locked_by = ?,
    locked_until = NULL
WHERE id IN ({{ids}})
  AND status = 'pending'

-- pick_sent: the first step of a retention batch, in its READ COMMITTED
-- transaction: locks up to $2 sent rows older than the retention ($1 ms),
-- oldest first, through sent_idx; SKIP LOCKED steps over rows someone
-- else holds (an operator's replay). Failed, pending and processing rows
-- never match. delete_sent.sql deletes them: MySQL cannot DELETE from a
-- table it selects from in a subquery.
SELECT id
FROM {{table}} FORCE INDEX (sent_idx)
WHERE status = 'sent'
  AND sent_at < UTC_TIMESTAMP(6) - INTERVAL ? * 1000 MICROSECOND
ORDER BY sent_at
LIMIT ?
FOR UPDATE SKIP LOCKED

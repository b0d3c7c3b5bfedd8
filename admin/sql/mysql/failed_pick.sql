-- failed_pick: the first step of a retry or a purge, in its READ
-- COMMITTED transaction: locks the failed rows the filter matches, at most
-- the last parameter of them in id order, through due_idx. A locking read
-- sees the latest committed row and waits for a relay that is writing it
-- back, so a row that is no longer failed (another operator retried it)
-- is not picked; once locked, no relay or operator can change it until
-- the change commits. failed_retry.sql or failed_purge.sql then changes
-- exactly these rows: MySQL has no UPDATE ... RETURNING.
-- The filter of every failed_*.sql statement, each part off when its
-- first parameter is NULL (the bounds come twice: tested for NULL, then
-- compared): the ids {{ids}}, the topics {{topics}}, created_at from/to,
-- failed_at from/to (ranges include their start, not their end), text
-- that last_error contains (any case; no wildcards).
SELECT id
FROM {{table}} FORCE INDEX (due_idx)
WHERE status = 'failed'
  AND (? IS NULL OR id IN ({{ids}}))
  AND (? IS NULL OR topic IN ({{topics}}))
  AND (? IS NULL OR created_at >= ?)
  AND (? IS NULL OR created_at < ?)
  AND (? IS NULL OR failed_at >= ?)
  AND (? IS NULL OR failed_at < ?)
  AND (? IS NULL OR LOCATE(LOWER(?), LOWER(last_error)) > 0)
ORDER BY id
LIMIT ?
FOR UPDATE

-- failed_count: how many failed rows the filter matches, through due_idx:
-- what a retry or purge with that filter would change now. Dry runs and
-- confirmations show it.
-- The filter of every failed_*.sql statement, each part off when its
-- first parameter is NULL (the bounds come twice: tested for NULL, then
-- compared): the ids {{ids}}, the topics {{topics}}, created_at from/to,
-- failed_at from/to (ranges include their start, not their end), text
-- that last_error contains (any case; no wildcards).
SELECT COUNT(*)
FROM {{table}} FORCE INDEX (due_idx)
WHERE status = 'failed'
  AND (? IS NULL OR id IN ({{ids}}))
  AND (? IS NULL OR topic IN ({{topics}}))
  AND (? IS NULL OR created_at >= ?)
  AND (? IS NULL OR created_at < ?)
  AND (? IS NULL OR failed_at >= ?)
  AND (? IS NULL OR failed_at < ?)
  AND (? IS NULL OR LOCATE(LOWER(?), LOWER(last_error)) > 0)

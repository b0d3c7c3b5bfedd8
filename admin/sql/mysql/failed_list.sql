-- failed_list: a page of failed rows in id order, through due_idx, which
-- leads with status (failed rows are few; left to itself the planner may
-- walk the primary key in id order, through every sent row).
-- The filter of every failed_*.sql statement, each part off when its
-- first parameter is NULL (the bounds come twice: tested for NULL, then
-- compared): the ids {{ids}}, the topics {{topics}}, created_at from/to,
-- failed_at from/to (ranges include their start, not their end), text
-- that last_error contains (any case; no wildcards).
-- The first parameter says whether to return the payload (without it
-- only its size travels); the last ones are the cursor (rows after this
-- id, twice) and the page size.
SELECT id,
       topic,
       `key`,
       headers,
       attempt,
       COALESCE(last_error, ''),
       created_at,
       failed_at,
       LENGTH(payload),
       CASE WHEN ? THEN payload END
FROM {{table}} FORCE INDEX (due_idx)
WHERE status = 'failed'
  AND (? IS NULL OR id IN ({{ids}}))
  AND (? IS NULL OR topic IN ({{topics}}))
  AND (? IS NULL OR created_at >= ?)
  AND (? IS NULL OR created_at < ?)
  AND (? IS NULL OR failed_at >= ?)
  AND (? IS NULL OR failed_at < ?)
  AND (? IS NULL OR LOCATE(LOWER(?), LOWER(last_error)) > 0)
  AND (? IS NULL OR id > ?)
ORDER BY id
LIMIT ?

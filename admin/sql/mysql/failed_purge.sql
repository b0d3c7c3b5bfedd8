-- failed_purge: deletes the failed rows {{ids}} that failed_pick.sql
-- locked, by primary key; fenced by state like failed_retry.sql.
DELETE FROM {{table}}
WHERE id IN ({{ids}})
  AND status = 'failed'

-- extend: renews the lease ($1 ms, by the database clock) of the rows
-- {{ids}} the claim (the last parameter) still holds; the rows it no
-- longer holds are the ones lost.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
WHERE id IN ({{ids}})
  AND locked_by = ?
  AND status = 'processing'

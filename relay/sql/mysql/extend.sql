-- extend: renews the lease ($3 ms, by the database clock) of the rows $1
-- (a JSON array of hex ids) the claim $2 still holds; the rows it no
-- longer holds are the ones lost.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) PATH '$')) AS j
STRAIGHT_JOIN {{table}} AS o FORCE INDEX (PRIMARY) ON o.id = UNHEX(j.id)
SET o.locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
WHERE o.locked_by = ?
  AND o.status = 'processing'

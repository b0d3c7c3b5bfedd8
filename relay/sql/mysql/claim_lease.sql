-- claim_lease: the last step of a lease claim, in the transaction that
-- locked the rows $1 (a JSON array of hex ids): leases them to the claim's
-- token $2 for $3 ms by the database clock, with one more attempt (which
-- saturates at the integer limit, as on PostgreSQL).
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) PATH '$')) AS j
STRAIGHT_JOIN {{table}} AS o FORCE INDEX (PRIMARY) ON o.id = UNHEX(j.id)
SET o.status = 'processing',
    o.locked_by = ?,
    o.locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,
    o.attempt = LEAST(o.attempt, 2147483646) + 1

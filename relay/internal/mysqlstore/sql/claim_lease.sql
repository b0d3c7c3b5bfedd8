-- claim_lease: the last step of a lease claim, in the transaction that
-- locked the rows {{ids}}: leases them to the claim's token $1 for $2 ms by
-- the database clock, with one more attempt (which saturates at the
-- integer limit, as on PostgreSQL).
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'processing',
    locked_by = ?,
    locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,
    attempt = LEAST(attempt, 2147483646) + 1
WHERE id IN ({{ids}})

-- claim_read: the last step of a lease claim, in its transaction: reads
-- the key, payload and headers of the rows {{ids}} it leased, those of
-- rows whose size fits the claim's bounds (mysqlstore.go), by primary
-- key.
SELECT id, `key`, payload, headers
FROM {{table}} FORCE INDEX (PRIMARY)
WHERE id IN ({{ids}})

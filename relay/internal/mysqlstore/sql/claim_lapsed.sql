-- claim_lapsed: locks up to $3 processing rows whose lease ran out (their
-- relay died or froze), longest expired first, through lapsed_idx; with
-- $1 (= $2) positive, only leases that ended within that many ms before
-- now. The attempt returned is the one the claim gives them, the size as
-- in claim_swept.sql. SKIP LOCKED lets replicas rescue side by side.
SELECT id, topic,
       LENGTH(payload) + COALESCE(LENGTH(`key`), 0) + LENGTH(headers) AS size,
       LEAST(attempt, 2147483646) + 1 AS attempt, created_at, next_retry_at
FROM {{table}} FORCE INDEX (lapsed_idx)
WHERE status = 'processing'
  AND locked_until < UTC_TIMESTAMP(6)
  AND (? <= 0 OR locked_until >= UTC_TIMESTAMP(6) - INTERVAL ? * 1000 MICROSECOND)
ORDER BY locked_until
LIMIT ?
FOR UPDATE SKIP LOCKED

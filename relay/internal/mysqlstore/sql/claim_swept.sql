-- claim_swept: the first step of a lease claim (mysqlstore.go), in its
-- READ COMMITTED transaction: locks the rows {{ids}} (the rows a look
-- below the floor found) that are still due pending rows or lapsed leases,
-- at most the last parameter of them, and returns them with their size
-- (payload, key and headers, which it does not send) and the attempt the
-- claim gives them. Each id is one primary-key look-up (FORCE INDEX: a scan, which
-- the planner may pick for a small table, would lock, and wait on, rows
-- other claims hold). SKIP LOCKED steps over rows another claim holds.
-- claim_lease.sql then writes the lease, and claim_read.sql reads the
-- rows the claim keeps.
SELECT id, topic,
       LENGTH(payload) + COALESCE(LENGTH(`key`), 0) + LENGTH(headers) AS size,
       LEAST(attempt, 2147483646) + 1 AS attempt, created_at, next_retry_at
FROM {{table}} FORCE INDEX (PRIMARY)
WHERE id IN ({{ids}})
  AND NOT (seq IS NOT NULL AND (? OR EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (p VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS o WHERE topic LIKE o.p)))
  AND ((status = 'pending' AND next_retry_at <= UTC_TIMESTAMP(6))
       OR (status = 'processing' AND locked_until < UTC_TIMESTAMP(6)))
LIMIT ?
FOR UPDATE SKIP LOCKED

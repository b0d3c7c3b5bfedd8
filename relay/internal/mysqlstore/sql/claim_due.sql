-- claim_due: locks up to $4 due pending rows, oldest first, from the
-- floor ($1 = $2 the next_retry_at, $3 the id; '1000-01-01' and the zero
-- id for every row) up, through due_idx in its own order. The floor is
-- written as an OR rather than a row comparison so that both MySQL and
-- MariaDB read it as a range of the index. SKIP LOCKED lets replicas
-- claim side by side without waiting on each other. Each row comes with
-- its size, as in claim_swept.sql.
SELECT id, topic,
       LENGTH(payload) + COALESCE(LENGTH(`key`), 0) + LENGTH(headers) AS size,
       LEAST(attempt, 2147483646) + 1 AS attempt, created_at, next_retry_at
FROM {{table}} FORCE INDEX (due_idx)
WHERE status = 'pending'
  AND next_retry_at <= UTC_TIMESTAMP(6)
  AND NOT (seq IS NOT NULL AND (? OR EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (p VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS o WHERE topic LIKE o.p)))
  AND (next_retry_at > ? OR (next_retry_at = ? AND id >= ?))
ORDER BY next_retry_at, id
LIMIT ?
FOR UPDATE SKIP LOCKED

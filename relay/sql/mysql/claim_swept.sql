-- claim_swept: the first step of a lease claim (store_mysql.go), in its
-- READ COMMITTED transaction: locks the rows $1 (a JSON array of hex ids,
-- the rows a look below the floor found) that are still due pending rows
-- or lapsed leases, at most $2 of them, and returns them with the attempt
-- the claim gives them. The ids are joined first (STRAIGHT_JOIN), so every
-- row is one primary-key look-up; SKIP LOCKED steps over rows another
-- claim holds. claim_lease.sql then writes the lease.
SELECT o.id, o.topic, o.`key`, o.payload, o.headers,
       LEAST(o.attempt, 2147483646) + 1 AS attempt, o.created_at, o.next_retry_at
FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) PATH '$')) AS j
STRAIGHT_JOIN {{table}} AS o FORCE INDEX (PRIMARY) ON o.id = UNHEX(j.id)
WHERE ((o.status = 'pending' AND o.next_retry_at <= UTC_TIMESTAMP(6))
       OR (o.status = 'processing' AND o.locked_until < UTC_TIMESTAMP(6)))
LIMIT ?
FOR UPDATE SKIP LOCKED

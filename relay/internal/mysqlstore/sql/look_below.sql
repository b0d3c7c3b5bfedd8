-- look_below: what a sweep would take, read without locking or writing
-- anything (claim_floor.go): up to $1 rows whose lease ran out, oldest
-- first, and up to $5 (= $1) due pending rows below the floor ($2 = $3
-- the next_retry_at, as UTC text; $4 the id), lowest first. The second
-- column says which branch found the row (1: a lapsed lease). Like
-- PostgreSQL's VACUUM, InnoDB's purge of the index entries of rows claimed
-- and sent is held off by any old read view in the server, which is what
-- the floor steps over; a claim takes the rows a look found by id
-- (claim_swept.sql).
(SELECT id, 1 AS lapsed
 FROM {{table}} FORCE INDEX (lapsed_idx)
 WHERE status = 'processing'
   AND locked_until < UTC_TIMESTAMP(6)
 ORDER BY locked_until
 LIMIT ?)
UNION ALL
(SELECT id, 0 AS lapsed
 FROM {{table}} FORCE INDEX (due_idx)
 WHERE status = 'pending'
   AND next_retry_at <= UTC_TIMESTAMP(6)
   AND NOT (seq IS NOT NULL AND (? OR EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (p VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS o WHERE topic LIKE o.p)))
   AND (next_retry_at < ? OR (next_retry_at = ? AND id < ?))
 ORDER BY next_retry_at, id
 LIMIT ?)

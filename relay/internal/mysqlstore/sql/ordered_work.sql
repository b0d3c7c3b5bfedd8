-- ordered_work: whether buckets ? to ? hold a due pending row of the
-- ordered topics (? every topic, or those a LIKE pattern of the JSON array ? matches): a shard
-- worth leasing.
SELECT COUNT(*)
FROM (
    SELECT 1
    FROM {{table}} FORCE INDEX (ordered_idx)
    WHERE status = 'pending'
      AND bucket BETWEEN ? AND ?
      AND seq IS NOT NULL
      AND next_retry_at <= UTC_TIMESTAMP(6)
      AND (? OR EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (p VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS o WHERE topic LIKE o.p))
    LIMIT 1
) AS w

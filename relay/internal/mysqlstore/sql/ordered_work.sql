-- ordered_work: whether buckets ? to ? hold a due pending row of the
-- ordered topics (? every topic, or those of the JSON array ?): a shard
-- worth leasing.
SELECT COUNT(*)
FROM (
    SELECT 1
    FROM {{table}} FORCE INDEX (ordered_idx)
    WHERE status = 'pending'
      AND bucket BETWEEN ? AND ?
      AND seq IS NOT NULL
      AND next_retry_at <= UTC_TIMESTAMP(6)
      AND (? OR JSON_CONTAINS(?, JSON_QUOTE(topic)))
    LIMIT 1
) AS w

-- ordered_read: up to ? pending rows of the ordered topics (? every
-- topic, or those a LIKE pattern of the JSON array ? matches) in buckets ? to ?, key by key
-- (topic and key hash) in seq order, from after the key (?, ?, ?) up to
-- and including the key (?, ?, ?), in ordered_idx order. The relay takes
-- each key's run of due rows from its first pending one
-- (docs/ordering.md#mysql-and-mariadb).
SELECT id, topic, bucket, khash, seq, next_retry_at <= UTC_TIMESTAMP(6) AS due
FROM {{table}} FORCE INDEX (ordered_idx)
WHERE status = 'pending'
  AND bucket BETWEEN ? AND ?
  AND seq IS NOT NULL
  AND (? OR EXISTS (SELECT 1 FROM JSON_TABLE(?, '$[*]' COLUMNS (p VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS o WHERE topic LIKE o.p))
  AND (bucket > ? OR (bucket = ? AND (khash > ? OR (khash = ? AND topic > ?))))
  AND (bucket < ? OR (bucket = ? AND (khash < ? OR (khash = ? AND topic <= ?))))
ORDER BY bucket, khash, topic, seq
LIMIT ?

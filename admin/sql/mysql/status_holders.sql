-- status_holders: the processing rows by the relay that holds them (the
-- replica id, locked_by without its "#<n>" claim number), through
-- lapsed_idx: how many rows, in how many claims, and the first and last of
-- their lease ends, in seconds from now (negative: lapsed).
SELECT SUBSTRING_INDEX(COALESCE(locked_by, ''), '#', 1) AS relay,
       COUNT(*),
       COUNT(DISTINCT locked_by),
       COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MIN(locked_until)) / 1e6, 0),
       COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), MAX(locked_until)) / 1e6, 0)
FROM {{table}} FORCE INDEX (lapsed_idx)
WHERE status = 'processing'
GROUP BY relay
ORDER BY relay

-- ordered_processing: the keys of buckets ? to ? with a row in flight on
-- the unordered path (a replica that did not list its topic), with the
-- least seq in flight: the key's later rows wait for it.
SELECT topic, khash, MIN(seq)
FROM {{table}} FORCE INDEX (ordered_idx)
WHERE status = 'processing'
  AND bucket BETWEEN ? AND ?
  AND seq IS NOT NULL
GROUP BY topic, khash

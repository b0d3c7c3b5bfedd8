-- ordered_take: the rows {{ids}} the ordered claim picked, if still
-- pending, with their size and the attempt this publish is, and seq, by
-- which the relay orders a key's rows. Nothing is written to them: the
-- shard's lease is the claim's hold.
SELECT id, topic,
       LENGTH(payload) + COALESCE(LENGTH(`key`), 0) + LENGTH(headers) AS size,
       LEAST(attempt, 2147483646) + 1 AS attempt, created_at, seq
FROM {{table}} FORCE INDEX (PRIMARY)
WHERE id IN ({{ids}})
  AND status = 'pending'

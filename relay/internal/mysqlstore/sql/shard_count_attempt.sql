-- shard_count_attempt: counts the attempt of rows a holder of the shard
-- claimed and wrote no outcome for (it died, or abandoned their publish),
-- as PostgreSQL's lease_shard.sql does, so that a row whose publish kills
-- every relay still reaches the maximum attempts and fails.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET attempt = LEAST(attempt, 2147483646) + 1
WHERE id IN ({{ids}})
  AND status = 'pending'

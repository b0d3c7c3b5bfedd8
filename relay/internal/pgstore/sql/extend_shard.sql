-- extend_shard: renews the lease ($3 ms) of shard $1 held by $2.
UPDATE {{shards}}
SET locked_until = now() + $3 * interval '1 millisecond'
WHERE shard = $1
  AND locked_by = $2

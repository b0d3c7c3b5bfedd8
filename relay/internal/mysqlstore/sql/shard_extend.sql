-- shard_extend: renews by ? ms the lease of shard ? held by ?.
UPDATE {{shards}}
SET locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND
WHERE shard = ?
  AND locked_by = ?

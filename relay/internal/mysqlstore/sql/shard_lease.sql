-- shard_lease: leases shard ?, locked by shard_lock.sql, to ? for ? ms.
UPDATE {{shards}}
SET locked_by = ?,
    locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,
    claimed = NULL
WHERE shard = ?

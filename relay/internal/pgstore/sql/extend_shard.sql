-- extend_shard: renews the lease (@lease_ms ms) of shard @shard held by
-- @lessee.
UPDATE {{shards}}
SET locked_until = now() + @lease_ms * interval '1 millisecond'
WHERE shard = @shard
  AND locked_by = @lessee

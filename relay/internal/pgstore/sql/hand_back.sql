-- hand_back: returns shard @shard held by @lessee; locked_until = now()
-- puts it at the end of the least-recently-served order. It leaves
-- claimed as it is: ids still there had no outcome written
-- (record_ordered.sql), and the next lease of the shard counts their
-- attempt (lease_shard.sql).
UPDATE {{shards}}
SET locked_by = NULL,
    locked_until = now()
WHERE shard = @shard
  AND locked_by = @lessee

-- shard_free: the shards whose lease ended, lapsed leases first (their
-- holder died), then the least recently served.
SELECT shard
FROM {{shards}}
WHERE locked_until < UTC_TIMESTAMP(6)
ORDER BY locked_by IS NULL, locked_until, shard

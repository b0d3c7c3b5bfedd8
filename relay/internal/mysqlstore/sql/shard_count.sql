-- shard_count: how many shards the shard table holds.
SELECT COUNT(*) FROM {{shards}}

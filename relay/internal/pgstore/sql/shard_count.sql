-- shard_count: how many shards the shard table holds (ordered delivery,
-- docs/ordering.md).
SELECT count(*) FROM {{shards}}

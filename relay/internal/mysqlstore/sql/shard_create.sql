-- shard_create: creates the shard rows {{values}} once.
INSERT IGNORE INTO {{shards}} (shard) VALUES {{values}}

-- shard_create: creates the shard rows ($1 of them) once; every replica
-- must agree on their number.
INSERT INTO {{shards}} (shard)
SELECT generate_series(0, $1 - 1)
ON CONFLICT DO NOTHING

-- shard_create: creates the shard rows (@shards of them) once; every
-- replica must agree on their number.
INSERT INTO {{shards}} (shard)
SELECT generate_series(0, @shards - 1)
ON CONFLICT DO NOTHING

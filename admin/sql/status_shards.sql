-- status_shards: the shard leases of ordered delivery (008): every shard,
-- who holds it (NULL: handed back, or never served) and when its lease
-- ends, in seconds from now (negative: ended; NULL: never served), and
-- how many rows its holder's claim has in flight (009).
SELECT shard,
       locked_by,
       CASE WHEN locked_until = '-infinity' THEN NULL
            ELSE extract(epoch FROM locked_until - now())::float8
       END,
       coalesce(cardinality(claimed), 0)
FROM {{shards}}
ORDER BY shard

-- 002 down: drops shard leases and the ordering columns.
DROP TABLE {{related "shards"}};
DROP INDEX {{schema}}.{{name "ordered_idx"}};
DROP INDEX {{schema}}.{{name "keyless_idx"}};
ALTER TABLE {{.Table}} DROP COLUMN bucket;
ALTER TABLE {{.Table}} DROP COLUMN tx;

-- 008 down: shards own the buckets with bucket % P = s again. The leases
-- move back to <table>_shards, so that a replica on the range mapping
-- claims no ordered row next to one on the old mapping (the fence of 008
-- up, the other way).
DROP INDEX IF EXISTS {{schema}}.{{name "ordered_head_idx"}};

DROP TABLE {{related "shard_ranges"}};

CREATE TABLE {{related "shards"}} (
    shard        integer     PRIMARY KEY,
    locked_by    text,
    locked_until timestamptz NOT NULL DEFAULT '-infinity'
);

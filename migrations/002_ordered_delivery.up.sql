-- 002: per-key ordered delivery (docs/ordering.md).
--
-- tx is the id of the writing transaction. A transaction that starts after
-- another committed always gets a larger id, so (tx, id) orders one key's
-- writes, and tx lets the relay wait until every transaction with a smaller
-- id has finished before it publishes a row in order.
ALTER TABLE {{.Table}}
    ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();

-- bucket spreads keys over 1024 buckets; shard s owns the buckets with
-- bucket % P = s. Rows without a key have no bucket and are never ordered.
ALTER TABLE {{.Table}}
    ADD COLUMN bucket smallint GENERATED ALWAYS AS (
        CASE WHEN key IS NULL THEN NULL
        ELSE (hashtextextended(encode(key, 'hex'), 0) & 1023)::smallint
        END
    ) STORED;

-- The ordered claim path: a bucket's unfinished rows in write order.
CREATE INDEX {{name "ordered_idx"}}
    ON {{.Table}} (bucket, tx, id)
    WHERE status IN ('pending', 'processing') AND bucket IS NOT NULL;

-- The unordered claim when every topic is ordered: rows without a key, so
-- that polling for them never walks a backlog of ordered rows.
CREATE INDEX {{name "keyless_idx"}}
    ON {{.Table}} (next_retry_at, id)
    WHERE status = 'pending' AND bucket IS NULL;

-- Shard leases, readable by humans: who holds a shard, until when. A shard
-- handed back gets locked_until = now(), so the least recently served shard
-- is handed out first. The relays create the rows (one per shard).
CREATE TABLE {{related "shards"}} (
    shard        integer     PRIMARY KEY,
    locked_by    text,
    locked_until timestamptz NOT NULL DEFAULT '-infinity'
);

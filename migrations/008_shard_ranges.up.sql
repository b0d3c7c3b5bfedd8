-- 008: a shard owns a contiguous range of buckets, so that a claim reads
-- its waiting rows in write order in one index scan (docs/ordering.md).
--
-- Until 007, shard s of P owned the buckets with bucket % P = s. From 008
-- on it owns those with bucket * P / 1024 = s (integer division): the
-- range from ceil(s * 1024 / P) up to, not including, ceil((s + 1) *
-- 1024 / P).
--
-- The fence. A replica on the old mapping must never hold a shard next to
-- one on the new mapping: both could serve one key at once and publish
-- its events out of order. So the leases move to a new table and the old
-- one is dropped: from the moment this migration commits, an older
-- replica's ordered statements fail and it claims no ordered row. (The
-- DROP waits for the claims that hold a shard row's lock.) What an older
-- replica already claimed stays in flight under its claim's lease, and
-- the new claim waits for it like for any claim in flight. Relays create
-- the shard rows of the new table when they start.
DROP TABLE {{related "shards"}};

CREATE TABLE {{related "shard_ranges"}} (
    shard        integer     PRIMARY KEY,
    locked_by    text,
    locked_until timestamptz NOT NULL DEFAULT '-infinity'
);

-- The ordered claim's first read: a shard's waiting rows in write order,
-- the bucket in the index so that rows of other shards are skipped
-- without a visit to the table. Its predicate names key, not bucket (the
-- same rows: bucket is NULL exactly when key is), so that only a
-- statement that states key IS NOT NULL can use it: the planner must
-- never answer a probe of one bucket (bucket = b ORDER BY tx, id LIMIT 1:
-- the lease's and the claim's) by walking this index from its start
-- for a bucket that holds no row, which it chose for such probes when the
-- predicate was the ordered indexes' own. Building it blocks writers; on a
-- large table build it first with CREATE INDEX CONCURRENTLY under the same
-- name, and this statement keeps it:
--
--   CREATE INDEX CONCURRENTLY outbox_ordered_head_idx ON outbox (tx, id, bucket)
--       WHERE status = 'pending' AND key IS NOT NULL;
CREATE INDEX IF NOT EXISTS {{name "ordered_head_idx"}}
    ON {{.Table}} (tx, id, bucket)
    WHERE status = 'pending' AND key IS NOT NULL;

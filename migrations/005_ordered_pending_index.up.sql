-- 005: the ordered index holds pending rows only (docs/benchmarks.md#indexes).
--
-- A claim turns a pending row into a processing one, and that update is
-- never HOT: every index whose predicate the new row version matches gets a
-- new entry. ordered_idx covered processing rows too, so every claim of a
-- keyed row, ordered or not, paid one more index entry; it was the largest
-- single cost of a claim. The ordered claim now reads a shard's processing
-- rows through processing_idx instead: there are only as many as are in
-- flight.
--
-- Building it blocks writers for as long as it takes (a SHARE lock in the
-- migration's transaction). On a large table build it first without
-- blocking anyone, under the name used here, and this migration keeps it:
--
--   CREATE INDEX CONCURRENTLY outbox_ordered_pending_idx ON outbox (bucket, tx, id)
--       WHERE status = 'pending' AND bucket IS NOT NULL;
CREATE INDEX IF NOT EXISTS {{name "ordered_pending_idx"}}
    ON {{.Table}} (bucket, tx, id)
    WHERE status = 'pending' AND bucket IS NOT NULL;

DROP INDEX IF EXISTS {{schema}}.{{name "ordered_idx"}};

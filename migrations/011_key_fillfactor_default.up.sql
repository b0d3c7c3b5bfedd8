-- 011: the primary key's pages fill to the default (90%) again, from their
-- next build or split on: 010's half-full key serves ordered delivery
-- only, and made every batch writer about 5% slower
-- (docs/benchmarks.md#ordered-delivery). A table that delivers in order
-- gets it back from `relay migrate up --ordered` (migrations.PrepareOrdered,
-- docs/ordering.md#the-primary-key-half-full); partitions created later
-- follow the newest partition's key (migrations.CreatePartitions).
--
-- 010 is left as it is: a database that applied it would never run an
-- edited 010 (the runner records versions, not contents).
DO $fillfactor$
DECLARE
    idx regclass;
BEGIN
    FOR idx IN
        -- The table and its partitions (none when it is not
        -- partitioned); the partitioned key itself is left out.
        SELECT c.conindid::regclass
        FROM (
            SELECT to_regclass({{literal .Table}}) AS relid
            UNION ALL
            SELECT relid FROM pg_partition_tree(to_regclass({{literal .Table}}))
        ) AS t
        JOIN pg_constraint AS c ON c.conrelid = t.relid AND c.contype = 'p'
        JOIN pg_class AS i ON i.oid = c.conindid AND i.relkind = 'i'
    LOOP
        EXECUTE format('ALTER INDEX %s RESET (fillfactor)', idx);
    END LOOP;
END
$fillfactor$;

-- 010: the primary key's pages are filled to half, not 90%, when they are
-- built and when they split (docs/benchmarks.md#ordered-delivery).
--
-- Every write-back turns pending rows into sent ones, and that update is
-- never HOT (status is in the predicates of the partial indexes): each
-- row gets a second entry in the primary key, next to its first. The rows
-- of an ordered claim lie one in sixteen (one shard's) across the table,
-- so a write-back of 500 of them adds an entry to some 250 leaf pages
-- instead of a few. Filled to 90%, those pages ran out of room again and
-- again, and each time PostgreSQL searched them for dead entries to
-- delete (bottom-up deletion): 13% of a backend's CPU in the ordered
-- write-back. Half-full pages hold the new entries until VACUUM removes
-- the old ones. The index of the pending backlog is twice as large; its
-- rows are short (a uuid).
--
-- ALTER INDEX ... SET applies to pages built or split from now on; the
-- pages of an existing table keep their fill until
--   REINDEX INDEX CONCURRENTLY <the primary key>;
-- rebuilds them without blocking writers. A partitioned table's primary
-- key cannot be altered, only the indexes of its partitions: each one's
-- is, and the relay creates new partitions' primary keys half full
-- (migrations.CreatePartitions).
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
        EXECUTE format('ALTER INDEX %s SET (fillfactor = 50)', idx);
    END LOOP;
END
$fillfactor$;

-- 011 down: the primary key's pages are built and split half full again,
-- as 010 left them.
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

-- delete_sent: deletes up to @limit sent rows older than the retention,
-- @retention_ms ms, oldest first. The inner scan reads sent_idx from its
-- low end and stops after the batch; SKIP LOCKED steps over rows someone
-- else holds. Failed, pending and processing rows are not in the index
-- and never match. The ids are an array, not an IN (subquery): the
-- planner then deletes them by primary key, where IN let it hash-join
-- against a scan of the whole table. On a partitioned table it runs on
-- one partition at a time, the table's name replaced by the partition's
-- (DeleteSent): the expired partitions the janitor could not drop and the
-- DEFAULT partition, never the partitions that will be dropped whole.
DELETE FROM {{table}}
WHERE id = ANY (ARRAY(
    SELECT id
    FROM {{table}}
    WHERE status = 'sent'
      AND sent_at < now() - @retention_ms * interval '1 millisecond'
    ORDER BY sent_at
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
))

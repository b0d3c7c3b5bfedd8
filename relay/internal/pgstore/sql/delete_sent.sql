-- delete_sent: deletes up to $2 sent rows older than the retention ($1
-- ms), oldest first. The inner scan reads sent_idx from its low end and
-- stops after the batch; SKIP LOCKED steps over rows someone else holds.
-- Failed, pending and processing rows are not in the index and never
-- match. The ids are an array, not an IN (subquery): the planner then
-- deletes them by primary key, where IN let it hash-join against a scan
-- of the whole table. $3 bounds the ids: on a partitioned table, the
-- first id past the newest expired partition, so that rows are deleted only
-- from expired partitions the janitor could not drop (and from the DEFAULT
-- partition), never from the partitions that will be dropped whole; on an
-- unpartitioned table, the largest id.
DELETE FROM {{table}}
WHERE id = ANY (ARRAY(
    SELECT id
    FROM {{table}}
    WHERE status = 'sent'
      AND sent_at < now() - $1 * interval '1 millisecond'
    ORDER BY sent_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
))

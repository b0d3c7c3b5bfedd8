-- status_sent: the sent rows. It counts them through sent_idx (004), up
-- to $1 rows: up to as many index entries as that. Beyond, Status takes
-- the estimate: the planner's statistics of the table (pg_class.reltuples,
-- kept by VACUUM and ANALYZE; -1 before the first) less the unfinished
-- and failed rows ($2). Also returns the database clock, and when the
-- oldest sent row was sent (one entry of sent_idx): replay can reach no
-- further back.
SELECT now(),
       (SELECT count(*) FROM (SELECT FROM {{table}} WHERE status = 'sent' LIMIT $1::bigint) AS s),
       (SELECT CASE WHEN c.reltuples < 0 THEN NULL
                    ELSE greatest(c.reltuples::bigint - $2::bigint, 0) END
        FROM pg_class AS c
        WHERE c.oid = '{{table}}'::regclass),
       (SELECT min(sent_at) FROM {{table}} WHERE status = 'sent')

-- status_sent: the sent rows. $1 true counts them exactly, through
-- sent_idx (004): it reads every entry, as long as an index-only scan of
-- that many rows takes. $1 false estimates them from the planner's
-- statistics of the table (pg_class.reltuples, kept by VACUUM and ANALYZE;
-- -1 before the first) less the unfinished and failed rows ($2), which
-- costs nothing. Also returns the database clock, and when the oldest
-- sent row was sent (one entry of sent_idx): replay can reach no further
-- back.
SELECT now(),
       CASE WHEN $1::bool
           THEN (SELECT count(*) FROM {{table}} WHERE status = 'sent')
           ELSE (SELECT CASE WHEN c.reltuples < 0 THEN NULL
                        ELSE greatest(c.reltuples::bigint - $2::bigint, 0) END
                 FROM pg_class AS c
                 WHERE c.oid = '{{table}}'::regclass)
       END,
       (SELECT min(sent_at) FROM {{table}} WHERE status = 'sent')

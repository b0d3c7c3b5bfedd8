-- status_sent: the sent rows. It counts them through sent_idx, up to the
-- first parameter's number of rows: up to as many index entries as that.
-- Beyond, Status takes the estimate: information_schema.TABLES.TABLE_ROWS
-- (InnoDB's sampled estimate, which MySQL 8 caches for
-- information_schema_stats_expiry) less the unfinished and failed rows
-- (second parameter); the last two are the table's database (NULL: the
-- connection's) and name. Also returns the database clock, and when the
-- oldest sent row was sent (one entry of sent_idx): replay can reach no
-- further back.
SELECT UTC_TIMESTAMP(6),
       (SELECT COUNT(*) FROM (SELECT 1 FROM {{table}} FORCE INDEX (sent_idx) WHERE status = 'sent' LIMIT ?) AS s),
       (SELECT GREATEST(CAST(t.TABLE_ROWS AS SIGNED) - ?, 0)
        FROM information_schema.TABLES AS t
        WHERE t.TABLE_SCHEMA = COALESCE(?, DATABASE())
          AND t.TABLE_NAME = ?),
       (SELECT MIN(sent_at) FROM {{table}} FORCE INDEX (sent_idx) WHERE status = 'sent')

-- status_counts: the unfinished and failed rows by state and topic. Each
-- branch reads the entries of one status in an index that leads with it
-- (due_idx for pending and failed, lapsed_idx for processing) and the rows
-- they point to; sent rows, the bulk of the table, are never read here.
-- Per row: the state, the topic, the rows, and
--   pending:    the due rows and how long the oldest one has been due (s);
--   processing: the rows whose lease ended (their relay died or froze)
--               and how long ago the oldest one's ended (s);
--   failed:     the parked rows (last_error 'parked: ...'; none on MySQL,
--               which has no ordered delivery) and nothing.
SELECT 'pending' AS state,
       topic,
       COUNT(*),
       COALESCE(SUM(next_retry_at <= UTC_TIMESTAMP(6)), 0),
       TIMESTAMPDIFF(MICROSECOND,
                     MIN(CASE WHEN next_retry_at <= UTC_TIMESTAMP(6) THEN next_retry_at END),
                     UTC_TIMESTAMP(6)) / 1e6
FROM {{table}} FORCE INDEX (due_idx)
WHERE status = 'pending'
GROUP BY topic
UNION ALL
SELECT 'processing',
       topic,
       COUNT(*),
       COALESCE(SUM(locked_until < UTC_TIMESTAMP(6)), 0),
       TIMESTAMPDIFF(MICROSECOND,
                     MIN(CASE WHEN locked_until < UTC_TIMESTAMP(6) THEN locked_until END),
                     UTC_TIMESTAMP(6)) / 1e6
FROM {{table}} FORCE INDEX (lapsed_idx)
WHERE status = 'processing'
GROUP BY topic
UNION ALL
SELECT 'failed',
       topic,
       COUNT(*),
       COALESCE(SUM(last_error LIKE 'parked: %'), 0),
       NULL
FROM {{table}} FORCE INDEX (due_idx)
WHERE status = 'failed'
GROUP BY topic
ORDER BY 2, 1

-- status_counts: the unfinished and failed rows by state and topic. Each
-- branch reads one partial index and the rows it points to: pending_idx
-- (001), processing_idx (001) and failed_idx (007). Sent rows, the bulk of
-- the table, are never read here, so the cost follows the backlog, not the
-- size of the table. Per row: the state, the topic, the rows, and
--   pending:    the due rows and how long the oldest one has been due (s);
--   processing: the rows whose lease ended (their relay died or froze)
--               and how long ago the oldest one's ended (s);
--   failed:     the parked rows (last_error 'parked: ...') and nothing.
SELECT 'pending' AS state,
       topic,
       count(*),
       count(*) FILTER (WHERE next_retry_at <= now()),
       extract(epoch FROM now() - min(next_retry_at) FILTER (WHERE next_retry_at <= now()))::float8
FROM {{table}}
WHERE status = 'pending'
GROUP BY topic
UNION ALL
SELECT 'processing',
       topic,
       count(*),
       count(*) FILTER (WHERE locked_until < now()),
       extract(epoch FROM now() - min(locked_until) FILTER (WHERE locked_until < now()))::float8
FROM {{table}}
WHERE status = 'processing'
GROUP BY topic
UNION ALL
SELECT 'failed',
       topic,
       count(*),
       count(*) FILTER (WHERE last_error LIKE 'parked: %'),
       NULL
FROM {{table}}
WHERE status = 'failed'
GROUP BY topic
ORDER BY 2, 1

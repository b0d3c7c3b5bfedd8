-- backlog_estimate: the planner's estimate of the rows in each state, for
-- the counts of backlog.sql that reached their limit (Relay.Backlog). The
-- statement is planned, never run: the estimates come from the table's
-- statistics (reltuples and the column statistics ANALYZE keeps), cost
-- nothing to read, and are as fresh as the last ANALYZE. The branches are
-- in the order of backlog.sql's counts; the relay reads "Plan Rows" of
-- each of the Append's plans.
EXPLAIN (FORMAT JSON)
SELECT 1
FROM {{table}}
WHERE status = 'pending'
  AND next_retry_at <= now()
UNION ALL
SELECT 2
FROM {{table}}
WHERE status = 'pending'
  AND next_retry_at > now()
UNION ALL
SELECT 3
FROM {{table}}
WHERE status = 'processing'
UNION ALL
SELECT 4
FROM {{table}}
WHERE status = 'failed'

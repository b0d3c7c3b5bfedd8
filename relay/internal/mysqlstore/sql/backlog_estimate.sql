-- backlog_estimate: the server's estimate of the rows of one state, for a
-- count of backlog.sql that reached its limit: EXPLAIN's rows for a range
-- of due_idx, which InnoDB estimates by diving into the index (planned,
-- not run). The first ? is the status; the next two bound next_retry_at:
-- the first true reads from the lowest, the second true up to
-- UTC_TIMESTAMP(6) (due), else from just after it to the highest
-- (delayed); both true for a whole state.
EXPLAIN SELECT 1
FROM {{table}} FORCE INDEX (due_idx)
WHERE status = ?
  AND next_retry_at >= IF(?, TIMESTAMP('1000-01-01 00:00:00'), UTC_TIMESTAMP(6) + INTERVAL 1 MICROSECOND)
  AND next_retry_at <= IF(?, UTC_TIMESTAMP(6), TIMESTAMP('9999-12-31 23:59:59.999999'))

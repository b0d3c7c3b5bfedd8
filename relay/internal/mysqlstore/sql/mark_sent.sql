-- mark_sent: rows {{ids}} the sink acknowledged are sent. Like every lease
-- write-back it is fenced: it touches only rows the claim (the last
-- parameter) still holds. locked_by is kept as a record of who handled
-- the row last.
--
-- Every write-back is one single-table UPDATE of an id list, each id one
-- primary-key look-up (FORCE INDEX: left to itself the planner may walk
-- every processing row of lapsed_idx, or scan a small table whole, and a
-- locking scan waits on every row another claim holds). A join with
-- JSON_TABLE, the counterpart of PostgreSQL's unnest, would keep the
-- parameter list fixed, but MariaDB runs a multi-table UPDATE through a
-- temporary table, written to disk when a text column is set.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'sent',
    sent_at = UTC_TIMESTAMP(6),
    locked_until = NULL,
    last_error = NULL
WHERE id IN ({{ids}})
  AND locked_by = ?
  AND status = 'processing'

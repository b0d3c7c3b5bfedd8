-- status_jobs: the periodic jobs (002; the retention janitor): who ran or
-- runs each (locked_by, the token of its latest run), whether a run holds
-- it now, in how many seconds it is due (negative: overdue), how long ago
-- its latest run started and finished (s), and what it deleted.
SELECT job,
       COALESCE(locked_by, ''),
       COALESCE(locked_until > UTC_TIMESTAMP(6), FALSE),
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), next_run_at) / 1e6,
       TIMESTAMPDIFF(MICROSECOND, last_started_at, UTC_TIMESTAMP(6)) / 1e6,
       TIMESTAMPDIFF(MICROSECOND, last_finished_at, UTC_TIMESTAMP(6)) / 1e6,
       last_deleted,
       total_deleted
FROM {{jobs}}
ORDER BY job

-- status_jobs: the periodic jobs (004; the retention janitor): who ran or
-- runs each (locked_by, the token of its latest run), whether a run holds
-- it now, in how many seconds it is due (negative: overdue), how long ago
-- its latest run started and finished (s), and what it deleted.
SELECT job,
       coalesce(locked_by, ''),
       coalesce(locked_until > now(), false),
       extract(epoch FROM next_run_at - now())::float8,
       extract(epoch FROM now() - last_started_at)::float8,
       extract(epoch FROM now() - last_finished_at)::float8,
       last_deleted,
       total_deleted
FROM {{jobs}}
ORDER BY job

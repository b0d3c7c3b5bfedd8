-- The retention janitor's statements (docs/architecture.md#retention) use
-- {{jobs}}, the jobs table of MySQL migration 002. Every write after the
-- claim is fenced by the run's token.
--
-- claim_job: starts a run of job $3 (token $1, lease $2 ms) when the job
-- is due and nobody holds it, in one statement; one row changed means the
-- run is ours. Of replicas trying at once, the first takes the row lock;
-- the others wait for it, re-read the row once it commits and find it
-- held. last_deleted counts the new run's rows from 0.
UPDATE {{jobs}}
SET locked_by = ?,
    locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,
    last_started_at = UTC_TIMESTAMP(6),
    last_deleted = 0
WHERE job = ?
  AND next_run_at <= UTC_TIMESTAMP(6)
  AND (locked_until IS NULL OR locked_until < UTC_TIMESTAMP(6))

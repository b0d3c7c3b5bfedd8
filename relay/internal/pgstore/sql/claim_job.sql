-- The retention janitor's statements (docs/architecture.md#retention) use
-- {{jobs}}, the jobs table of migration 004. @job is the job's name and
-- @owner the token of the run that holds it: every write after the claim
-- is fenced by it.
--
-- claim_job: starts a run (token @owner, lease @lease_ms ms) when the job
-- is due and nobody holds it, in one statement. Of replicas trying at
-- once, the first takes the row lock; the others wait for it, re-check
-- the row once it commits and find it held. last_deleted counts the new
-- run's rows from 0.
UPDATE {{jobs}}
SET locked_by = @owner,
    locked_until = now() + @lease_ms * interval '1 millisecond',
    last_started_at = now(),
    last_deleted = 0
WHERE job = @job
  AND next_run_at <= now()
  AND (locked_until IS NULL OR locked_until < now())
RETURNING job

-- finish_job: ends a run: the job is released (locked_until = now,
-- locked_by kept as a record of who ran last). A complete run ($1 = $2
-- true) records when it finished and schedules the next run $3 ms later;
-- a run cut short leaves next_run_at as it was, already due, so that
-- another replica carries on at its next look. $4 is the job, $5 the run.
UPDATE {{jobs}}
SET locked_until = UTC_TIMESTAMP(6),
    last_finished_at = CASE WHEN ? THEN UTC_TIMESTAMP(6) ELSE last_finished_at END,
    next_run_at = CASE WHEN ? THEN UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND ELSE next_run_at END
WHERE job = ?
  AND locked_by = ?

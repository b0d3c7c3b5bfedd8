-- finish_job: ends a run: the job is released (locked_until = now(),
-- locked_by kept as a record of who ran last). A complete run ($3) records
-- when it finished and schedules the next run $4 ms later; a run cut
-- short leaves next_run_at as it was, already due, so that another
-- replica carries on at its next look.
UPDATE {{jobs}}
SET locked_until = now(),
    last_finished_at = CASE WHEN $3::bool THEN now() ELSE last_finished_at END,
    next_run_at = CASE WHEN $3::bool THEN now() + $4 * interval '1 millisecond' ELSE next_run_at END
WHERE job = $1
  AND locked_by = $2

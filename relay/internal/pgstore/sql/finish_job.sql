-- finish_job: ends a run: the job is released (locked_until = now(),
-- locked_by kept as a record of who ran last). A complete run (@complete)
-- records when it finished and schedules the next run @interval_ms ms
-- later; a run cut short leaves next_run_at as it was, already due, so
-- that another replica carries on at its next look.
UPDATE {{jobs}}
SET locked_until = now(),
    last_finished_at = CASE WHEN @complete::bool THEN now() ELSE last_finished_at END,
    next_run_at = CASE WHEN @complete::bool THEN now() + @interval_ms * interval '1 millisecond' ELSE next_run_at END
WHERE job = @job
  AND locked_by = @owner

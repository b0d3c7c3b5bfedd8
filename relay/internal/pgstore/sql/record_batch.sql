-- record_batch: runs in the transaction of a batch's DELETE: counts the
-- batch (@deleted rows) and extends the lease (@lease_ms ms). When the
-- run no longer holds the job it matches nothing, and the batch is rolled
-- back.
UPDATE {{jobs}}
SET locked_until = now() + @lease_ms * interval '1 millisecond',
    last_deleted = last_deleted + @deleted,
    total_deleted = total_deleted + @deleted
WHERE job = @job
  AND locked_by = @owner

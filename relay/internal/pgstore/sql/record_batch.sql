-- record_batch: runs in the transaction of a batch's DELETE: counts the
-- batch ($4 rows) and extends the lease ($3 ms). When the run no longer
-- holds the job it matches nothing, and the batch is rolled back.
UPDATE {{jobs}}
SET locked_until = now() + $3 * interval '1 millisecond',
    last_deleted = last_deleted + $4,
    total_deleted = total_deleted + $4
WHERE job = $1
  AND locked_by = $2

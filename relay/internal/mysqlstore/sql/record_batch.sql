-- record_batch: runs in the transaction of a batch's DELETE: extends the
-- lease ($1 ms) and counts the batch ($2 = $3 rows) for the run $5 of job
-- $4. When the run no longer holds the job it changes nothing, and the
-- batch is rolled back. The lease end always moves, so a held job always
-- counts as one changed row.
UPDATE {{jobs}}
SET locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,
    last_deleted = last_deleted + ?,
    total_deleted = total_deleted + ?
WHERE job = ?
  AND locked_by = ?

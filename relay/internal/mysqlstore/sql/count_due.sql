-- count_due: the number of due pending rows, at most $1 of them: it reads
-- no more than that many entries of due_idx.
SELECT COUNT(*) FROM (
    SELECT 1
    FROM {{table}} FORCE INDEX (due_idx)
    WHERE status = 'pending'
      AND next_retry_at <= UTC_TIMESTAMP(6)
    LIMIT ?
) AS due

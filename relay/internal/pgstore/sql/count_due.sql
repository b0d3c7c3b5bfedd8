-- count_due: the number of due pending rows, at most @limit of them: it
-- reads no more than that many entries of pending_idx.
SELECT count(*) FROM (
    SELECT 1
    FROM {{table}}
    WHERE status = 'pending'
      AND next_retry_at <= now()
    LIMIT @limit
) AS due

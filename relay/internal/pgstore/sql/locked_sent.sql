-- The outcome statements of a lock claim (locked_*.sql) run in the
-- claim's transaction, on rows it holds locked, so they need no fence;
-- each records the attempt, and the claim's token in locked_by as a record
-- of who handled the row last. Rows left alone (released) are unchanged
-- when the transaction commits: claimable again at once.
--
-- locked_sent: rows @ids are sent; @owner is the claim's token.
UPDATE {{table}}
SET status = 'sent',
    sent_at = now(),
    attempt = least(attempt, 2147483646) + 1,
    locked_by = @owner,
    locked_until = NULL,
    last_error = NULL
WHERE id = ANY(@ids)

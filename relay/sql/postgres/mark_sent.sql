-- mark_sent: rows $1 the sink acknowledged are sent. Like every lease
-- write-back it is fenced: it touches only rows the claim $2 still holds.
-- locked_by is kept as a record of who handled the row last.
UPDATE {{table}}
SET status = 'sent',
    sent_at = now(),
    locked_until = NULL,
    last_error = NULL
WHERE id = ANY($1)
  AND locked_by = $2
  AND status = 'processing'

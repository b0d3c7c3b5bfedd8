-- replay: puts the sent rows {{ids}} that replay_pick.sql locked back to
-- pending, due at once, attempt 0, keeping their id (the event id
-- consumers drop duplicates by) and everything they carry. Fenced by
-- state all the same: no other state is ever touched.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'pending',
    attempt = 0,
    next_retry_at = UTC_TIMESTAMP(6),
    sent_at = NULL,
    locked_until = NULL,
    last_error = NULL
WHERE id IN ({{ids}})
  AND status = 'sent'

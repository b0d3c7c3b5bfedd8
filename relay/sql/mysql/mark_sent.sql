-- mark_sent: rows $1 (a JSON array of hex ids) the sink acknowledged are
-- sent. Like every lease write-back it is fenced: it touches only rows the
-- claim $2 still holds. locked_by is kept as a record of who handled the
-- row last. The ids are joined first (STRAIGHT_JOIN) and each row is
-- read by primary key (FORCE INDEX): left to itself the planner may walk
-- every processing row of lapsed_idx, or on a small table scan it whole,
-- and a locking scan waits on every row another claim holds. Every
-- statement that takes a list of ids is written the same way.
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) PATH '$')) AS j
STRAIGHT_JOIN {{table}} AS o FORCE INDEX (PRIMARY) ON o.id = UNHEX(j.id)
SET o.status = 'sent',
    o.sent_at = UTC_TIMESTAMP(6),
    o.locked_until = NULL,
    o.last_error = NULL
WHERE o.locked_by = ?
  AND o.status = 'processing'

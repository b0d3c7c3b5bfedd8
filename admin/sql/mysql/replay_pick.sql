-- replay_pick: the first step of a replay, in its READ COMMITTED
-- transaction: locks the sent rows the filter matches, at most the last
-- parameter of them in id order. With ids the planner reads the primary
-- key, with a sent_at range sent_idx; with only topics and a created_at
-- range it scans the table. The retention janitor's pick (SKIP LOCKED)
-- steps over rows locked here, and a row it deleted first is not found,
-- which replay then reports. replay.sql changes exactly these rows.
-- The filter of replay_pick.sql and replay_count.sql, each part off when
-- its first parameter is NULL (the bounds come twice: tested for NULL,
-- then compared): the ids {{ids}}, the topics {{topics}}, created_at
-- from/to, sent_at from/to (ranges include their start, not their end).
SELECT id
FROM {{table}}
WHERE status = 'sent'
  AND (? IS NULL OR id IN ({{ids}}))
  AND (? IS NULL OR topic IN ({{topics}}))
  AND (? IS NULL OR created_at >= ?)
  AND (? IS NULL OR created_at < ?)
  AND (? IS NULL OR sent_at >= ?)
  AND (? IS NULL OR sent_at < ?)
ORDER BY id
LIMIT ?
FOR UPDATE

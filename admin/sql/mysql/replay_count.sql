-- replay_count: how many sent rows the filter matches: what a replay with
-- that filter would change now.
-- The filter of replay_pick.sql and replay_count.sql, each part off when
-- its first parameter is NULL (the bounds come twice: tested for NULL,
-- then compared): the ids {{ids}}, the topics {{topics}}, created_at
-- from/to, sent_at from/to (ranges include their start, not their end).
SELECT COUNT(*)
FROM {{table}}
WHERE status = 'sent'
  AND (? IS NULL OR id IN ({{ids}}))
  AND (? IS NULL OR topic IN ({{topics}}))
  AND (? IS NULL OR created_at >= ?)
  AND (? IS NULL OR created_at < ?)
  AND (? IS NULL OR sent_at >= ?)
  AND (? IS NULL OR sent_at < ?)

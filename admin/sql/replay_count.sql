-- replay_count: how many sent rows the filter $1-$6 (replay.sql) matches:
-- what a replay with that filter would change now. With a sent_at range
-- it reads sent_idx (004) over that range; with ids, the primary key;
-- with only topics and a created_at range, it scans the table.
SELECT count(*)
FROM {{table}}
WHERE status = 'sent'
  AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
  AND ($2::text[] IS NULL OR topic = ANY($2::text[]))
  AND ($3::timestamptz IS NULL OR created_at >= $3::timestamptz)
  AND ($4::timestamptz IS NULL OR created_at < $4::timestamptz)
  AND ($5::timestamptz IS NULL OR sent_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR sent_at < $6::timestamptz)

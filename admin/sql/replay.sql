-- replay: puts sent rows back to pending, due at once, attempt 0, keeping
-- their id (the event id consumers drop duplicates by), their tx and
-- everything they carry. The filter, each part off when NULL: $1 ids, $2
-- topics, $3/$4 created_at from/to, $5/$6 sent_at from/to (ranges include
-- their start, not their end); at most $7 rows in id order (NULL: all).
-- Fenced by state: the rows are locked, which the retention janitor's
-- DELETE (SKIP LOCKED) steps over, and a row no longer sent by then is
-- left alone. It returns the ids it changed.
WITH picked AS (
    SELECT id
    FROM {{table}}
    WHERE status = 'sent'
      AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
      AND ($2::text[] IS NULL OR topic = ANY($2::text[]))
      AND ($3::timestamptz IS NULL OR created_at >= $3::timestamptz)
      AND ($4::timestamptz IS NULL OR created_at < $4::timestamptz)
      AND ($5::timestamptz IS NULL OR sent_at >= $5::timestamptz)
      AND ($6::timestamptz IS NULL OR sent_at < $6::timestamptz)
    ORDER BY id
    LIMIT $7::bigint
    FOR UPDATE
),
-- Rows pending again below the ordered shards' floors: the floors go
-- (migration 009), and the next claims start from each bucket's first row.
floors AS (
    UPDATE {{shards}}
    SET floor_tx = NULL
    WHERE floor_tx IS NOT NULL
      AND EXISTS (SELECT 1 FROM picked)
)
UPDATE {{table}} AS o
SET status = 'pending',
    attempt = 0,
    next_retry_at = now(),
    sent_at = NULL,
    locked_until = NULL,
    last_error = NULL
FROM picked
WHERE o.id = picked.id
  AND o.status = 'sent'
RETURNING o.id

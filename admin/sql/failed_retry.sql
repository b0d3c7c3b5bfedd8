-- failed_retry: puts the failed rows the filter $1-$7 (failed_list.sql)
-- matches, at most $8 of them in id order (NULL: all), back to pending:
-- due at once, attempt 0, failed_at cleared, last_error kept ($9 false)
-- or cleared ($9 true). Fenced by state: the rows are locked, and a row
-- that is no longer failed by then (another operator retried it, a relay
-- claimed it since) is left alone; no other state is ever touched. It
-- returns the ids it changed.
WITH picked AS (
    SELECT id
    FROM {{table}}
    WHERE status = 'failed'
      AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
      AND ($2::text[] IS NULL OR topic = ANY($2::text[]))
      AND ($3::timestamptz IS NULL OR created_at >= $3::timestamptz)
      AND ($4::timestamptz IS NULL OR created_at < $4::timestamptz)
      AND ($5::timestamptz IS NULL OR failed_at >= $5::timestamptz)
      AND ($6::timestamptz IS NULL OR failed_at < $6::timestamptz)
      AND ($7::text IS NULL OR strpos(lower(last_error), lower($7::text)) > 0)
    ORDER BY id
    LIMIT $8::bigint
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
    locked_until = NULL,
    failed_at = NULL,
    last_error = CASE WHEN $9::bool THEN NULL ELSE o.last_error END
FROM picked
WHERE o.id = picked.id
  AND o.status = 'failed'
RETURNING o.id

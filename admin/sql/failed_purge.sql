-- failed_purge: deletes the failed rows the filter $1-$7 (failed_list.sql)
-- matches, at most $8 of them in id order (NULL: all). Fenced by state
-- like failed_retry.sql: only rows still failed once locked are deleted.
-- The ids are an array, not an IN (subquery), so that the rows are
-- deleted by primary key (as in the janitor's delete_sent.sql). It
-- returns the ids it deleted.
DELETE FROM {{table}}
WHERE id = ANY (ARRAY(
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
))
  AND status = 'failed'
RETURNING id

-- failed_count: how many failed rows the filter $1-$7 (failed_list.sql)
-- matches, through failed_idx: what a retry or purge with that filter
-- would change now. Dry runs and confirmations show it.
SELECT count(*)
FROM {{table}}
WHERE status = 'failed'
  AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
  AND ($2::text[] IS NULL OR topic = ANY($2::text[]))
  AND ($3::timestamptz IS NULL OR created_at >= $3::timestamptz)
  AND ($4::timestamptz IS NULL OR created_at < $4::timestamptz)
  AND ($5::timestamptz IS NULL OR failed_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR failed_at < $6::timestamptz)
  AND ($7::text IS NULL OR strpos(lower(last_error), lower($7::text)) > 0)

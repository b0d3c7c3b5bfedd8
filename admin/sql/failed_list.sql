-- failed_list: a page of failed rows in id order, through failed_idx
-- (007), or the primary key when ids are given. Every failed_*.sql
-- statement takes the same filter, each part off when NULL:
--   $1 ids, $2 topics, $3/$4 created_at from/to, $5/$6 failed_at
--   from/to (ranges include their start, not their end), $7 text that
--   last_error contains (any case; no wildcards).
-- $8 is the cursor (rows after this id), $9 the page size, and $10 whether
-- to return the payload: without it only its size travels.
SELECT id,
       topic,
       key,
       headers,
       attempt,
       coalesce(last_error, ''),
       created_at,
       failed_at,
       octet_length(payload),
       CASE WHEN $10::bool THEN payload END
FROM {{table}}
WHERE status = 'failed'
  AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
  AND ($2::text[] IS NULL OR topic = ANY($2::text[]))
  AND ($3::timestamptz IS NULL OR created_at >= $3::timestamptz)
  AND ($4::timestamptz IS NULL OR created_at < $4::timestamptz)
  AND ($5::timestamptz IS NULL OR failed_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR failed_at < $6::timestamptz)
  AND ($7::text IS NULL OR strpos(lower(last_error), lower($7::text)) > 0)
  AND ($8::uuid IS NULL OR id > $8::uuid)
ORDER BY id
LIMIT $9::bigint

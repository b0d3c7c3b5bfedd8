-- audit_list: a page of the audit trail (007), newest first, by its
-- primary key: $1 the cursor (entries before this id; NULL: from the
-- newest), $2 the most entries returned.
SELECT id,
       at,
       actor,
       action,
       filter,
       row_count
FROM {{audit}}
WHERE ($1::bigint IS NULL OR id < $1::bigint)
ORDER BY id DESC
LIMIT $2::bigint

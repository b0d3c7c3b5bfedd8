-- audit_list: a page of the audit trail (003), newest first, by its
-- primary key: the cursor (entries before this id; NULL: from the
-- newest), given twice, then the most entries returned.
SELECT id,
       at,
       actor,
       action,
       `filter`,
       row_count
FROM {{audit}}
WHERE (? IS NULL OR id < ?)
ORDER BY id DESC
LIMIT ?

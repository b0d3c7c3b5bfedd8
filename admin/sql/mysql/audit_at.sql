-- audit_at: the time of the audit entry just written (by its id).
SELECT at
FROM {{audit}}
WHERE id = ?

-- audit: records an admin action in the audit trail (007), in the
-- transaction of the change: $1 who, $2 the action, $3 its filter and
-- options as JSON, $4 the rows it changed. The time is the database's.
-- It returns the entry's id and time.
INSERT INTO {{audit}} (actor, action, filter, row_count)
VALUES ($1, $2, $3, $4)
RETURNING id, at

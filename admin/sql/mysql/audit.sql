-- audit: records an admin action in the audit trail (003), in the
-- transaction of the change: who, the action, its filter and options as
-- JSON, the rows it changed. The time is the database's, in UTC. The
-- entry's id is the insert id; audit_at.sql reads its time back.
INSERT INTO {{audit}} (at, actor, action, `filter`, row_count)
VALUES (UTC_TIMESTAMP(6), ?, ?, ?, ?)

-- 007 down: drops the admin commands' audit trail and every entry in it,
-- the failed-row index and the failure times.
DROP TABLE {{related "audit"}};
DROP INDEX {{schema}}.{{name "failed_idx"}};
ALTER TABLE {{.Table}} DROP COLUMN failed_at;

-- 004 down: no janitor state, no sent-row index; sent rows stay until
-- someone deletes them.
DROP TABLE {{related "jobs"}};
DROP INDEX {{schema}}.{{name "sent_idx"}};

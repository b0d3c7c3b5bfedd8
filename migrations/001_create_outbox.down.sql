-- 001 down: drops the outbox table and every event in it.
DROP TABLE {{.Table}};

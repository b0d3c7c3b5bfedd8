-- 001 (MySQL/MariaDB): drops the outbox table and every event in it.
DROP TABLE IF EXISTS {{.Table}};

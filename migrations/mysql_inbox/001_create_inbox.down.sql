-- inbox 001 (MySQL/MariaDB): drops the inbox table.
DROP TABLE IF EXISTS {{.Table}};

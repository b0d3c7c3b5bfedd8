-- 002 (MySQL/MariaDB): drops the jobs table.
DROP TABLE IF EXISTS {{related "jobs"}};

-- 003 (MySQL/MariaDB): drops the audit trail.
DROP TABLE IF EXISTS {{related "audit"}};

-- 002 (MySQL/MariaDB): retention, as PostgreSQL's 004. Sent rows are kept
-- for a retention window and then deleted in bounded batches by a janitor
-- that one replica at a time runs (docs/architecture.md#retention); failed
-- rows are never deleted. The janitor's index, sent_idx, came with 001.
--
-- Periodic jobs, one row each, readable by humans: who holds a job
-- (locked_by, the token of one run) and until when (locked_until, UTC),
-- when it may run next (next_run_at, claimed atomically), and what the
-- runs did. Times come from the database clock, in UTC.
CREATE TABLE IF NOT EXISTS {{related "jobs"}} (
    job              VARCHAR(64)  NOT NULL,
    locked_by        VARCHAR(255) NULL,
    locked_until     DATETIME(6)  NULL,
    next_run_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    last_started_at  DATETIME(6)  NULL,
    last_finished_at DATETIME(6)  NULL,
    last_deleted     BIGINT       NULL,
    total_deleted    BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (job)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The retention job is due at once; the relays never create job rows.
-- IGNORE: a re-run after a migrator died keeps the row it made.
INSERT IGNORE INTO {{related "jobs"}} (job) VALUES ('retention');

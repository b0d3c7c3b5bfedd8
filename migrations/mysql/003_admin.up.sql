-- 003 (MySQL/MariaDB): the audit trail of the admin commands, as
-- PostgreSQL's 007 (docs/operations.md#admin-commands). failed_at, 007's
-- other half, came with 001. Every admin action that changes rows leaves
-- one row here, written in the transaction that changes them: who asked
-- (actor), when (the database clock, UTC), what (the action and its
-- filters as JSON), and how many rows it changed. Relays never read or
-- write it, and nothing deletes its rows.
CREATE TABLE IF NOT EXISTS {{related "audit"}} (
    id         BIGINT       NOT NULL AUTO_INCREMENT,
    at         DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    actor      VARCHAR(255) NOT NULL,
    action     VARCHAR(64)  NOT NULL,
    `filter`   JSON         NOT NULL DEFAULT ('{}'),
    row_count  BIGINT       NOT NULL,
    PRIMARY KEY (id),
    -- Reading the trail by time, and deleting old entries.
    KEY at_idx (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- 001 (MySQL/MariaDB): the outbox table, with the same columns and
-- meanings as PostgreSQL's after its migrations 001-007
-- (docs/architecture.md#the-outbox-table). The MySQL migrations are
-- numbered on their own (migrations/mysql.go says why).
--
-- Times are DATETIME(6) in UTC: every default and every statement of the
-- relay uses UTC_TIMESTAMP(6), never NOW(6), whose value depends on the
-- session's time_zone. The table's collation is utf8mb4_bin, so that
-- topics, dedup keys and claim tokens compare byte for byte, as text does
-- on PostgreSQL (a case-insensitive dedup_key would refuse "A" beside "a",
-- and a case-insensitive fence would let one token stand for another).
--
-- id is a UUIDv7 in 16 bytes, given by the writer: there is no default
-- (004 adds one, for writers in plain SQL).
-- `key` is a reserved word and always quoted.
--
-- MySQL has no partial indexes, and InnoDB appends the primary key to
-- every secondary index, so each index leads with status and a claim reads
-- only the entries of the status it wants:
--   due_idx    (status, next_retry_at, id): due pending rows, oldest first,
--              in the claim's order; also counts any status.
--   lapsed_idx (status, locked_until): the rescue of processing rows whose
--              lease ran out, longest expired first, without walking
--              the due rows.
--   sent_idx   (status, sent_at): the retention janitor's scan (PostgreSQL's
--              004 adds it; a fresh MySQL table gets it at once, since
--              MySQL 8 has no CREATE INDEX IF NOT EXISTS to make a later
--              ALTER re-runnable).
-- Failed rows are few and get no index of their own (PostgreSQL's 007
-- failed_idx): due_idx finds them by status.
--
-- MySQL commits DDL at once, so a migration cannot be rolled back: each
-- statement here may run again after a migrator died before recording the
-- version, and therefore says IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id            BINARY(16)   NOT NULL,
    topic         VARCHAR(249) NOT NULL,
    `key`         BLOB         NULL,
    payload       LONGBLOB     NOT NULL,
    headers       JSON         NOT NULL DEFAULT ('{}'),
    status        VARCHAR(10)  NOT NULL DEFAULT 'pending',
    attempt       INT          NOT NULL DEFAULT 0,
    next_retry_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    locked_by     VARCHAR(255) NULL,
    locked_until  DATETIME(6)  NULL,
    last_error    MEDIUMTEXT   NULL,
    created_at    DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    sent_at       DATETIME(6)  NULL,
    dedup_key     VARCHAR(512) NULL,
    failed_at     DATETIME(6)  NULL,
    PRIMARY KEY (id),
    UNIQUE KEY dedup_key_idx (dedup_key),
    KEY due_idx (status, next_retry_at, id),
    KEY lapsed_idx (status, locked_until),
    KEY sent_idx (status, sent_at),
    CONSTRAINT {{name "status_check"}}
        CHECK (status IN ('pending', 'processing', 'sent', 'failed'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- 005 (MySQL/MariaDB): ordered delivery (docs/ordering.md#mysql-and-mariadb).
-- InnoDB cannot say whether an earlier write of a key may still commit,
-- so writers number each key's events instead: a BEFORE INSERT trigger,
-- which `relay migrate up --ordered` creates (migrations.PrepareOrderedMySQL),
-- bumps the key's row in <table>_keys and stores the new number in seq.
-- The counter row stays locked until the writer's transaction ends, so a
-- key's numbers are dense and in commit order: once seq n + 1 is visible,
-- seq n is committed. Rows without the trigger (keyless, or written before
-- it) keep seq, khash and bucket NULL and take the unordered path.
--
--   seq    the event's number within its topic and key
--   khash  SHA-256 of the key (a BLOB cannot lead an index)
--   bucket 0-1023, from khash; shard s of P owns bucket * P / 1024 = s
--
-- ordered_idx serves the ordered claim, key by key in seq order within a
-- shard's buckets; with bucket NULL it finds keyless rows. MySQL 8 has no
-- ADD COLUMN IF NOT EXISTS: the ALTER runs, as one atomic statement, only
-- when the table lacks seq, so that a migrator that died before recording
-- the version can run again.
SET @outbox_005 = IF((SELECT COUNT(*) FROM information_schema.COLUMNS
                      WHERE TABLE_SCHEMA = {{.SchemaSQL}} AND TABLE_NAME = {{.NameSQL}} AND COLUMN_NAME = 'seq') > 0,
    'DO 0',
    'ALTER TABLE {{.Table}}
         ADD COLUMN seq    BIGINT     NULL,
         ADD COLUMN khash  BINARY(32) NULL,
         ADD COLUMN bucket SMALLINT   NULL,
         ADD KEY ordered_idx (status, bucket, khash, topic, seq)');
PREPARE outbox_005 FROM @outbox_005;
EXECUTE outbox_005;
DEALLOCATE PREPARE outbox_005;

-- One counter row per topic and key ever written while the trigger exists.
CREATE TABLE IF NOT EXISTS {{related "keys"}} (
    topic VARCHAR(249) NOT NULL,
    khash BINARY(32)   NOT NULL,
    seq   BIGINT       NOT NULL,
    PRIMARY KEY (topic, khash)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The shard leases, as PostgreSQL's <table>_shard_ranges: one row per
-- shard, which the first relay with ordered topics fills. claimed holds
-- the 16-byte ids of the batch in flight, whose attempt the next lease
-- counts; cur_* is the last key a claim looked at, after which the next
-- claim starts, so that the shard's keys are served in turn.
CREATE TABLE IF NOT EXISTS {{related "shard_ranges"}} (
    shard        INT          NOT NULL,
    locked_by    VARCHAR(255) NULL,
    locked_until DATETIME(6)  NOT NULL DEFAULT '1000-01-01 00:00:00',
    claimed      LONGBLOB     NULL,
    cur_bucket   SMALLINT     NULL,
    cur_khash    BINARY(32)   NULL,
    cur_topic    VARCHAR(249) NULL,
    PRIMARY KEY (shard)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

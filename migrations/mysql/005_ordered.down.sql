-- 005 (MySQL/MariaDB): drops ordered delivery's trigger, tables and
-- columns; the ALTER only when seq is there, so that it may run again.
DROP TRIGGER IF EXISTS {{related "ordered"}};
DROP TABLE IF EXISTS {{related "shard_ranges"}};
DROP TABLE IF EXISTS {{related "keys"}};
SET @outbox_005 = IF((SELECT COUNT(*) FROM information_schema.COLUMNS
                      WHERE TABLE_SCHEMA = {{.SchemaSQL}} AND TABLE_NAME = {{.NameSQL}} AND COLUMN_NAME = 'seq') = 0,
    'DO 0',
    'ALTER TABLE {{.Table}}
         DROP KEY ordered_idx,
         DROP COLUMN bucket,
         DROP COLUMN khash,
         DROP COLUMN seq');
PREPARE outbox_005 FROM @outbox_005;
EXECUTE outbox_005;
DEALLOCATE PREPARE outbox_005;

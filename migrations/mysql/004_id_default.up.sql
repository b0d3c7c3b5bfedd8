-- 004 (MySQL/MariaDB): a default for id, as PostgreSQL's 006, so that a
-- writer in plain SQL (another language, the mysql client, a stored
-- procedure) can insert with
--   INSERT INTO outbox (topic, `key`, payload) VALUES (...)
-- and get an id made by the database whose order is the insertion order
-- within a transaction (docs/mysql.md#writing-with-plain-sql). Writers
-- that give an id (the Go writer does) never evaluate the default.
--
-- The id is a UUID in the layout of version 7 (RFC 9562), as the Go
-- writer's and PostgreSQL's 006 default make them, so that ids of all
-- three sort together by time:
--   48 bits  unix time in milliseconds, UTC_TIMESTAMP(6)
--    4 bits  version, 7
--   12 bits  the fraction of the millisecond, in units of 256 ns
--    2 bits  variant, 10
--   62 bits  the low 62 bits of UUID_SHORT()
-- UTC_TIMESTAMP(6) is the time the statement began: one value for every
-- row of a statement, and later for each later statement. UUID_SHORT()
-- counts up across the server, once per row in row order (a multi-row
-- VALUES in list order, INSERT ... SELECT in its ORDER BY), from the
-- server's start time in seconds shifted left 24 bits, so it also grows
-- across restarts; its top byte, server_id's low 8 bits, is constant and
-- only 6 of them are kept. A transaction's ids therefore strictly
-- increase in insertion order, unless the server's clock steps back
-- between two of its statements: a default cannot remember the last time
-- used, as PostgreSQL's 006 does.
--
-- Why an expression default and not a BEFORE INSERT trigger: it is one
-- statement, costs nothing when the id is given, and needs no TRIGGER
-- privilege; with a binary log (on by default in MySQL 8) CREATE TRIGGER
-- may also need SUPER unless log_bin_trust_function_creators is set.
--
-- Both servers accept this statement as written: MODIFY with a column
-- definition whose DEFAULT is a parenthesised expression (MySQL 8.0.13+,
-- MariaDB 10.2+), and nondeterministic built-ins in a default (MySQL bans
-- UUID_SHORT() only from generated columns and CHECK constraints). It is
-- tested on MariaDB only: no MySQL 8 server runs on the project's
-- machines. Bit operators work on BIGINT UNSIGNED on both; HEX and UNHEX
-- turn the two 64-bit halves into the 16 bytes. Under binlog_format
-- MIXED the inserts that use the default are logged as rows (the
-- migrations refuse STATEMENT).
--
-- Only the column's definition changes, not a row: ids already in the
-- table stay. MariaDB does it in place without copying the table
-- (ALGORITHM=INSTANT is accepted); running it again sets the same default.
ALTER TABLE {{.Table}}
    MODIFY id BINARY(16) NOT NULL DEFAULT (UNHEX(CONCAT(
        LPAD(HEX(
            ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000) << 16)
            | (7 << 12)
            | (((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) MOD 1000) * 1000) >> 8)
        ), 16, '0'),
        LPAD(HEX(
            (1 << 63)
            | (UUID_SHORT() & ((1 << 62) - 1))
        ), 16, '0')
    )));

-- 007: what the admin commands need (relay status, relay failed, relay
-- replay; docs/operations.md#admin-commands).

-- When a row failed, so that failed rows can be listed and re-driven by
-- the time they failed. The relay sets it when it marks a row failed; a
-- retry by an operator clears it. Rows that failed before this migration
-- have none. Adding a column without a default changes only the catalog:
-- the table is not rewritten (it takes an ACCESS EXCLUSIVE lock for that
-- moment, as 006 does; docs/architecture.md#migrations).
ALTER TABLE {{.Table}}
    ADD COLUMN failed_at timestamptz;

-- Failed rows in id order: relay failed list pages through them, relay
-- status counts them, and retry and purge pick them, without reading any
-- other row. Partial: failed rows are few, and no other row gets an
-- entry. Building it blocks writers; on a large table build it first with
-- CREATE INDEX CONCURRENTLY under the same name, and this statement keeps
-- it:
--
--   CREATE INDEX CONCURRENTLY outbox_failed_idx ON outbox (id)
--       WHERE status = 'failed';
CREATE INDEX IF NOT EXISTS {{name "failed_idx"}}
    ON {{.Table}} (id)
    WHERE status = 'failed';

-- The audit trail. Every admin action that changes rows (failed retry,
-- failed purge, replay) leaves one row here, written in the transaction
-- that changes them, so that there is no change without its record: who
-- asked (actor), when (the database clock), what (the action and its
-- filters as JSON), and how many rows it changed. Dry runs and reads leave
-- none. Relays never read or write it, and nothing deletes its rows:
-- delete old ones by hand.
CREATE TABLE {{related "audit"}} (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL,
    action     text        NOT NULL,
    filter     jsonb       NOT NULL DEFAULT '{}',
    row_count  bigint      NOT NULL
);

-- Reading the trail by time, and deleting old entries.
CREATE INDEX {{name "audit_at_idx"}}
    ON {{related "audit"}} (at);

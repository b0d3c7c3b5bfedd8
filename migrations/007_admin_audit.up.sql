-- 007: the audit trail of the admin commands (relay failed retry|purge,
-- relay replay; docs/operations.md). Every action that changes rows
-- leaves one row here, written in the transaction that changes them, so
-- that there is no change without its record: who asked (actor), when
-- (the database clock), what (the action and its filters as JSON), and how
-- many rows it changed. Dry runs and reads leave none. Relays never read
-- or write it, and nothing deletes its rows: delete old ones by hand.
CREATE TABLE {{related "audit"}} (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL,
    action     text        NOT NULL,
    filter     jsonb       NOT NULL DEFAULT '{}',
    row_count  bigint      NOT NULL
);

-- Reading the trail newest first, and deleting old entries, use it.
CREATE INDEX {{name "audit_at_idx"}}
    ON {{related "audit"}} (at);

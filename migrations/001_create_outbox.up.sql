-- 001: the outbox table. The application inserts one row per event inside its
-- own transaction; the relay moves it pending -> processing -> sent | failed.
-- Why each column exists: docs/architecture.md.
--
-- A table created with `relay migrate up --partition-interval` is
-- partitioned by range of id: ids are UUIDv7, whose first 48 bits are the
-- time they were made, so each partition holds the events of one interval,
-- and retention drops whole partitions (docs/architecture.md#partitioned-tables).
CREATE TABLE {{.Table}} (
    id            uuid        PRIMARY KEY,
    topic         text        NOT NULL,
    key           bytea,
    payload       bytea       NOT NULL,
    headers       jsonb       NOT NULL DEFAULT '{}',
    status        text        NOT NULL DEFAULT 'pending'
                  CONSTRAINT {{name "status_check"}}
                  CHECK (status IN ('pending', 'processing', 'sent', 'failed')),
    attempt       integer     NOT NULL DEFAULT 0,
    next_retry_at timestamptz NOT NULL DEFAULT now(),
    locked_by     text,
    locked_until  timestamptz,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    sent_at       timestamptz,
    dedup_key     text
){{if .Partitioned}} PARTITION BY RANGE (id){{end}};
{{if not .Partitioned}}
-- Idempotent writes: at most one row per dedup key. Partial, so the many rows
-- without a key cost no index entries.
CREATE UNIQUE INDEX {{name "dedup_key_idx"}}
    ON {{.Table}} (dedup_key)
    WHERE dedup_key IS NOT NULL;
{{else}}
-- A partitioned table cannot hold a unique index that leaves out its
-- partition key, so dedup keys are kept unique by a table of their own:
-- a row with a dedup key first inserts (dedup_key, id) there, and a key
-- already there makes the trigger skip the row, as ON CONFLICT DO NOTHING
-- would. The index on the outbox table serves look-ups by key.
CREATE INDEX {{name "dedup_key_idx"}}
    ON {{.Table}} (dedup_key)
    WHERE dedup_key IS NOT NULL;

CREATE TABLE {{related "dedup"}} (
    dedup_key text PRIMARY KEY,
    id        uuid NOT NULL
);

-- Dropping a partition deletes its keys by id range.
CREATE INDEX {{name "dedup_id_idx"}}
    ON {{related "dedup"}} (id);

CREATE FUNCTION {{related "dedup_insert"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{related "dedup"}} (dedup_key, id)
    VALUES (NEW.dedup_key, NEW.id)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER {{name "dedup_insert"}}
    BEFORE INSERT ON {{.Table}}
    FOR EACH ROW WHEN (NEW.dedup_key IS NOT NULL)
    EXECUTE FUNCTION {{related "dedup_insert"}}();

-- A deleted row (retention's row deletes, relay failed purge) frees its key.
CREATE FUNCTION {{related "dedup_delete"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {{related "dedup"}} WHERE dedup_key = OLD.dedup_key AND id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER {{name "dedup_delete"}}
    AFTER DELETE ON {{.Table}}
    FOR EACH ROW WHEN (OLD.dedup_key IS NOT NULL)
    EXECUTE FUNCTION {{related "dedup_delete"}}();

-- Rows whose id no partition covers land here: ids that are not
-- time-ordered, or made by a clock far behind or ahead. Writes never fail
-- for want of a partition, even when no relay has created one for a while.
CREATE TABLE {{related "default"}} PARTITION OF {{.Table}} DEFAULT;
{{end}}
-- The claim path: due pending rows, oldest first. Partial, so sent and failed
-- rows (the bulk of the table over time) are never scanned.
CREATE INDEX {{name "pending_idx"}}
    ON {{.Table}} (next_retry_at, id)
    WHERE status = 'pending';

-- The rescue path: rows whose lease ran out because their relay died or froze.
CREATE INDEX {{name "processing_idx"}}
    ON {{.Table}} (locked_until)
    WHERE status = 'processing';

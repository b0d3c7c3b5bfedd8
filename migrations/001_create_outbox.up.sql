-- 001: the outbox table. The application inserts one row per event inside its
-- own transaction; the relay moves it pending -> processing -> sent | failed.
-- Why each column exists: docs/architecture.md.
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
);

-- Idempotent writes: at most one row per dedup key. Partial, so the many rows
-- without a key cost no index entries.
CREATE UNIQUE INDEX {{name "dedup_key_idx"}}
    ON {{.Table}} (dedup_key)
    WHERE dedup_key IS NOT NULL;

-- The claim path: due pending rows, oldest first. Partial, so sent and failed
-- rows (the bulk of the table over time) are never scanned.
CREATE INDEX {{name "pending_idx"}}
    ON {{.Table}} (next_retry_at, id)
    WHERE status = 'pending';

-- The rescue path: rows whose lease ran out because their relay died or froze.
CREATE INDEX {{name "processing_idx"}}
    ON {{.Table}} (locked_until)
    WHERE status = 'processing';

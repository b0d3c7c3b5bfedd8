-- 004: retention. Sent rows are kept for a retention window (replay, audit,
-- duplicate suppression by dedup_key) and then deleted in bounded batches by
-- a janitor that one replica at a time runs (docs/architecture.md#retention).
-- Failed rows are never deleted: they wait for an operator.

-- The janitor's scan: sent rows, oldest first. Partial, so pending,
-- processing and failed rows cost no entries, and a batch reads only the
-- rows it deletes instead of walking the whole table. Building it blocks
-- writers; on a large table build it first with CREATE INDEX CONCURRENTLY
-- under the same name (docs/architecture.md#migrations), and this
-- statement keeps it.
CREATE INDEX IF NOT EXISTS {{name "sent_idx"}}
    ON {{.Table}} (sent_at)
    WHERE status = 'sent';

-- Periodic jobs, one row each, readable by humans: who holds a job
-- (locked_by, the token of one run) and until when (locked_until), when it
-- may run next (next_run_at, claimed atomically so that one replica runs it
-- per interval), and what the runs did. A finished run keeps its token in
-- locked_by and sets locked_until to its end. Times come from the database
-- clock.
CREATE TABLE {{related "jobs"}} (
    job              text        PRIMARY KEY,
    locked_by        text,
    locked_until     timestamptz,
    next_run_at      timestamptz NOT NULL DEFAULT now(),
    last_started_at  timestamptz,
    last_finished_at timestamptz,
    last_deleted     bigint,
    total_deleted    bigint      NOT NULL DEFAULT 0
);

-- The retention job is due at once; the relays never create job rows. A
-- partitioned table also has the job that creates partitions ahead of time.
INSERT INTO {{related "jobs"}} (job) VALUES ('retention'){{if .Partitioned}}, ('partitions'){{end}};

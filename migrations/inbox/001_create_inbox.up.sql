-- inbox 001: the inbox table of package inbox (docs/consumers.md), in its
-- own versions table ({{.Table}}'s _migrations), apart from the outbox's.
--
-- One row per event a consumer applied: the primary key makes a second
-- record of (consumer, event_id) wait for the first transaction, then
-- find it. topic and received_at serve retention (Inbox.Prune, by
-- received_at) and deliberate re-processing (Inbox.ForgetTopic).
-- Retention deletes in batches rather than dropping partitions: a
-- partitioned table's primary key must hold the partition column, so
-- partitions by time could not refuse a duplicate that arrives in a later
-- partition than its first delivery.
CREATE TABLE {{.Table}} (
    consumer    text        NOT NULL,
    event_id    uuid        NOT NULL,
    topic       text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

CREATE INDEX {{name "received_idx"}} ON {{.Table}} (consumer, received_at);

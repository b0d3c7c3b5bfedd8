-- backlog: the table's rows by state, for metrics (Relay.Backlog). Each
-- count reads one partial index and stops at @limit rows, so that a read
-- costs at most @limit index entries per state however large the
-- backlog: pending_idx (001) for due and delayed pending rows,
-- processing_idx (001), failed_idx (007). Sent rows, the bulk of the
-- table, are never read.
--   - oldest_due_ms: now() - next_retry_at of the pending row due
--     longest, in ms, 0 when none is due: the first entry of pending_idx.
--   - keys_blocked: with ordered delivery (@any_ordered), the keys of
--     ordered topics (@all_ordered: every topic, @ordered_topics: those
--     these LIKE patterns match)
--     with a pending row waiting for a retry after a failed publish
--     (last_error set, next_retry_at ahead). Such a row is its key's
--     earliest unfinished event (a key's later events are published only
--     after it), so the key's later events wait behind it. It reads the
--     @blocked_scan delayed rows due soonest, through pending_idx, and the
--     table rows they point to: retries are due within BackoffMax, before
--     most scheduled events.
SELECT
    (SELECT count(*) FROM (
        SELECT 1
        FROM {{table}}
        WHERE status = 'pending'
          AND next_retry_at <= now()
        LIMIT @limit
    ) AS due) AS pending_due,
    (SELECT count(*) FROM (
        SELECT 1
        FROM {{table}}
        WHERE status = 'pending'
          AND next_retry_at > now()
        LIMIT @limit
    ) AS delayed) AS pending_delayed,
    (SELECT count(*) FROM (
        SELECT 1
        FROM {{table}}
        WHERE status = 'processing'
        LIMIT @limit
    ) AS processing) AS processing,
    (SELECT count(*) FROM (
        SELECT 1
        FROM {{table}}
        WHERE status = 'failed'
        LIMIT @limit
    ) AS failed) AS failed,
    (SELECT coalesce(extract(epoch FROM now() - min(next_retry_at)) * 1000, 0)::float8
        FROM {{table}}
        WHERE status = 'pending'
          AND next_retry_at <= now()
    ) AS oldest_due_ms,
    (SELECT count(DISTINCT (topic, key)) FROM (
        SELECT topic, key, last_error, bucket
        FROM {{table}}
        WHERE @any_ordered::bool
          AND status = 'pending'
          AND next_retry_at > now()
        ORDER BY next_retry_at
        LIMIT @blocked_scan
    ) AS delayed
    WHERE last_error IS NOT NULL
      AND bucket IS NOT NULL
      AND (@all_ordered::bool OR topic LIKE ANY(@ordered_topics::text[]))
    ) AS keys_blocked

-- backlog: the table's rows by state, for metrics (Relay.Backlog). Each
-- count reads one index and stops at ? (the limit) rows, so that a read
-- costs at most that many index entries per state however large the
-- table: due_idx (status, next_retry_at, id) for due and delayed pending
-- rows and for failed rows, lapsed_idx (status, locked_until) for
-- processing rows. Sent rows are never read.
--   - oldest_due_ms: UTC_TIMESTAMP(6) - next_retry_at of the pending row
--     due longest, in ms, 0 when none is due: the first entry of due_idx.
-- Keys blocked are PostgreSQL's (ordered delivery): always 0 here.
SELECT
    (SELECT COUNT(*) FROM (
        SELECT 1
        FROM {{table}} FORCE INDEX (due_idx)
        WHERE status = 'pending'
          AND next_retry_at <= UTC_TIMESTAMP(6)
        LIMIT ?
    ) AS due_rows) AS pending_due,
    (SELECT COUNT(*) FROM (
        SELECT 1
        FROM {{table}} FORCE INDEX (due_idx)
        WHERE status = 'pending'
          AND next_retry_at > UTC_TIMESTAMP(6)
        LIMIT ?
    ) AS delayed_rows) AS pending_delayed,
    (SELECT COUNT(*) FROM (
        SELECT 1
        FROM {{table}} FORCE INDEX (lapsed_idx)
        WHERE status = 'processing'
        LIMIT ?
    ) AS processing_rows) AS processing,
    (SELECT COUNT(*) FROM (
        SELECT 1
        FROM {{table}} FORCE INDEX (due_idx)
        WHERE status = 'failed'
        LIMIT ?
    ) AS failed_rows) AS failed,
    (SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(next_retry_at), UTC_TIMESTAMP(6)) / 1000, 0)
        FROM {{table}} FORCE INDEX (due_idx)
        WHERE status = 'pending'
          AND next_retry_at <= UTC_TIMESTAMP(6)
    ) AS oldest_due_ms

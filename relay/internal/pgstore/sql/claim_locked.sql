-- claim_locked: the lock claim (ClaimLock). It picks the rows claim.sql
-- would, up to @limit (lapsed leases of lease claims first, then due
-- pending rows; @all_ordered and @ordered_topics are the ordered topics
-- as in claim.sql) and locks them without writing. It returns the
-- attempt this claim makes, which the outcome records (locked_*.sql).
--
-- It bounds what it returns as claim.sql does: rows up to the one at
-- which their sizes reach @batch_bytes (the rows after it stay locked,
-- unread, until the claim's transaction ends), and a row above
-- @event_bytes without its key, payload and headers.
SELECT id, topic, key, payload, headers, least(attempt, 2147483646) + 1, created_at, size FROM (
    SELECT id, topic,
           CASE WHEN size <= @event_bytes THEN key END AS key,
           CASE WHEN size <= @event_bytes THEN payload END AS payload,
           CASE WHEN size <= @event_bytes THEN headers END AS headers,
           attempt, created_at, size,
           sum(size) FILTER (WHERE size <= @event_bytes)
               OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
    FROM (
        SELECT * FROM (
            SELECT id, topic, key, payload, headers, attempt, created_at,
                   octet_length(payload) + coalesce(octet_length(key), 0) + pg_column_size(headers) AS size
            FROM {{table}}
            WHERE status = 'processing'
              AND locked_until < now()
              AND NOT (bucket IS NOT NULL AND (@all_ordered::bool OR topic LIKE ANY(@ordered_topics::text[])))
            ORDER BY locked_until
            LIMIT @limit
            FOR UPDATE SKIP LOCKED
        ) AS expired
        UNION ALL
        SELECT * FROM (
            SELECT id, topic, key, payload, headers, attempt, created_at,
                   octet_length(payload) + coalesce(octet_length(key), 0) + pg_column_size(headers) AS size
            FROM {{table}}
            WHERE status = 'pending'
              AND next_retry_at <= now()
              AND NOT (bucket IS NOT NULL AND (@all_ordered::bool OR topic LIKE ANY(@ordered_topics::text[])))
            ORDER BY next_retry_at, id
            LIMIT @limit
            FOR UPDATE SKIP LOCKED
        ) AS due
        LIMIT @limit
    ) AS picked
) AS p
WHERE coalesce(before, 0) < @batch_bytes

-- claim_locked: the lock claim (ClaimLock). It picks the rows claim.sql
-- would, up to $1 (lapsed leases of lease claims first, then due pending
-- rows; $2 and $3 are the ordered topics as in claim.sql) and locks them
-- without writing. It returns the attempt this claim makes, which the
-- outcome records (locked_*.sql).
SELECT id, topic, key, payload, headers, least(attempt, 2147483646) + 1, created_at FROM (
    SELECT * FROM (
        SELECT id, topic, key, payload, headers, attempt, created_at
        FROM {{table}}
        WHERE status = 'processing'
          AND locked_until < now()
          AND NOT (bucket IS NOT NULL AND ($2::bool OR topic = ANY($3::text[])))
        ORDER BY locked_until
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS expired
    UNION ALL
    SELECT * FROM (
        SELECT id, topic, key, payload, headers, attempt, created_at
        FROM {{table}}
        WHERE status = 'pending'
          AND next_retry_at <= now()
          AND NOT (bucket IS NOT NULL AND ($2::bool OR topic = ANY($3::text[])))
        ORDER BY next_retry_at, id
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS due
    LIMIT $1
) AS picked

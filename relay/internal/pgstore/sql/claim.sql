-- claim: the lease claim. It takes up to @limit rows and leases them to
-- the claim's token @owner for @lease_ms ms, with one more attempt: the
-- rows @swept that a look below the floor found (look_below.sql), then,
-- when @lapsed, processing rows whose lease ran out (their relay died or
-- froze), then due pending rows, oldest first, from the floor
-- (@from_due, @from_id) up (relay/claim_floor.go). It returns
-- next_retry_at, for the next floor, and each row's tuple id, for
-- mark_sent_by_tid.sql (NULL when not @by_tid).
--
-- Each branch uses its own partial index; SKIP LOCKED lets replicas claim
-- side by side without waiting on each other. Rows of ordered topics
-- (@all_ordered: every topic, @ordered_topics: those these LIKE
-- patterns match) that have a key are
-- the ordered claim's (ordered_take.sql); with @all_ordered the filter
-- folds to "bucket IS NULL", which keyless_idx matches. The swept rows are
-- taken by primary key if they are still due or lapsed (IS TRUE keeps the
-- planner off a partial index, see mark_sent.sql). The lapsed branch reads
-- processing_idx from @lapsed_within_ms before now() (NULL: from its
-- oldest entry): until a VACUUM it holds a dead entry for every row
-- claimed since, as pending_idx does below the floor. The attempt
-- saturates at the integer limit, so that a row set there by hand fails
-- instead of breaking every claim with "integer out of range".
--
-- On a partitioned table both scans read only ids from @bound up (NULL:
-- every id; always NULL on a plain table): the first id of a minute
-- before the floor's time (pgstore/claim.go, claimBound), so that the
-- planner leaves out the older partitions instead of planning a path over
-- each. What lies below it is found by look_below.sql and comes as
-- @swept, and the relay lowers @bound to the least of those.
--
-- The update finds the picked rows by tuple id when @by_tid (a plain
-- table): a TID scan reads each row's heap page and no index, less time
-- than probing the primary key (docs/benchmarks.md#default-settings-adaptive-batches);
-- the rows are locked, so their tuple ids stay. On a partitioned table,
-- where a tuple id names a row in each partition, it finds them by id.
-- The relay plans each statement with its parameters
-- (plan_cache_mode=force_custom_plan, settings.go), so the CASE folds to
-- one of its arms and costs nothing.
--
-- What the relay holds is bounded before any payload is read: taken keeps
-- the picked rows, in the order the LIMIT took them, up to the row at
-- which their sizes (payload, key and headers as stored, none of them
-- read) reach @batch_bytes, at least one. A row above @event_bytes counts
-- for nothing there and is returned without its key, payload and
-- headers, with its size, for the relay to fail.
WITH picked AS (
    SELECT id, ctid, size FROM (
        SELECT id, ctid, octet_length(payload) + coalesce(octet_length(key), 0) + pg_column_size(headers) AS size
        FROM {{table}}
        WHERE cardinality(@swept::uuid[]) > 0
          AND id = ANY(@swept::uuid[])
          AND ((status = 'pending' AND next_retry_at <= now())
               OR (status = 'processing' AND locked_until < now())) IS TRUE
        LIMIT @limit
        FOR UPDATE SKIP LOCKED
    ) AS swept
    UNION ALL
    SELECT id, ctid, size FROM (
        SELECT id, ctid, octet_length(payload) + coalesce(octet_length(key), 0) + pg_column_size(headers) AS size
        FROM {{table}}
        WHERE @lapsed::bool
          AND status = 'processing'
          AND locked_until < now()
          AND (@lapsed_within_ms::bigint IS NULL OR locked_until >= now() - @lapsed_within_ms * interval '1 millisecond')
          AND (@bound::uuid IS NULL OR id >= @bound)
          AND NOT (bucket IS NOT NULL AND (@all_ordered::bool OR topic LIKE ANY(@ordered_topics::text[])))
        ORDER BY locked_until
        LIMIT @limit
        FOR UPDATE SKIP LOCKED
    ) AS expired
    UNION ALL
    SELECT id, ctid, size FROM (
        SELECT id, ctid, octet_length(payload) + coalesce(octet_length(key), 0) + pg_column_size(headers) AS size
        FROM {{table}}
        WHERE status = 'pending'
          AND next_retry_at <= now()
          AND (next_retry_at, id) >= (@from_due, @from_id)
          AND (@bound::uuid IS NULL OR id >= @bound)
          AND NOT (bucket IS NOT NULL AND (@all_ordered::bool OR topic LIKE ANY(@ordered_topics::text[])))
        ORDER BY next_retry_at, id
        LIMIT @limit
        FOR UPDATE SKIP LOCKED
    ) AS due
    LIMIT @limit
),
taken AS (
    SELECT id, ctid
    FROM (
        SELECT id, ctid,
               sum(size) FILTER (WHERE size <= @event_bytes)
                   OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
        FROM picked
    ) AS p
    WHERE coalesce(before, 0) < @batch_bytes
),
leased AS (
    UPDATE {{table}} AS o
    SET status = 'processing',
        locked_by = @owner,
        locked_until = now() + @lease_ms * interval '1 millisecond',
        attempt = least(o.attempt, 2147483646) + 1
    WHERE CASE WHEN @by_tid
               THEN o.ctid = ANY (ARRAY(SELECT ctid FROM taken)) AND o.tableoid = '{{table}}'::regclass
               ELSE o.id = ANY (ARRAY(SELECT id FROM taken)) AND (@bound::uuid IS NULL OR o.id >= @bound)
          END
    RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.attempt, o.created_at,
              octet_length(o.payload) + coalesce(octet_length(o.key), 0) + pg_column_size(o.headers) AS size,
              o.next_retry_at, CASE WHEN @by_tid THEN o.ctid END AS tid
)
SELECT id, topic,
       CASE WHEN size <= @event_bytes THEN key END,
       CASE WHEN size <= @event_bytes THEN payload END,
       CASE WHEN size <= @event_bytes THEN headers END,
       attempt, created_at, size, next_retry_at, tid
FROM leased

-- claim: the lease claim. It takes up to $1 rows and leases them to the
-- claim's token $2 for $3 ms, with one more attempt: the rows $10 a look
-- below the floor found first, then, when $8, processing rows whose lease
-- ran out (their relay died or froze), then due pending rows, oldest
-- first, from the floor ($4, $5) up (relay/claim_floor.go).
-- Each branch uses its own partial index; SKIP LOCKED lets replicas claim
-- side by side without waiting on each other. Rows of ordered topics ($6: every topic, $7:
-- these) that have a key are left to the ordered claim (ordered_take.sql); with $6 true the
-- filter folds to "bucket IS NULL", which keyless_idx matches. The
-- attempt saturates at the integer limit, so that a row whose attempt was
-- set there by hand fails (attempt beyond MaxAttempts) instead of
-- breaking every claim with "integer out of range". It returns
-- next_retry_at for the next floor, and each row's tuple id for
-- mark_sent_by_tid.sql (NULL on a partitioned table, see below).
--
-- The lapsed branch reads processing_idx from the lease end $9 ms before
-- now() ($9 NULL: from its oldest entry), and the due branch pending_idx
-- from the floor: until a VACUUM both indexes hold a dead entry for every
-- row claimed and sent since, and a transaction held open anywhere in the
-- database keeps VACUUM from removing any of them. $8 false folds the
-- lapsed branch away, $9 NULL its lower bound.
--
-- On a partitioned table both read only rows from the id $11 up (NULL:
-- every row; an unpartitioned table always passes NULL): the relay makes
-- it the first id of a minute before the floor's time (claimBound), so
-- that the planner leaves out every partition older than that, where it
-- would build a path over every partition's indexes in each branch,
-- milliseconds of planning per claim with tens of partitions
-- (docs/benchmarks.md#retention-by-partition). What lies below it (a
-- retry of an old event, a replayed one, an old lapsed lease) is found
-- by the looks (look_below.sql) and taken by id here; the relay lowers
-- the bound of a claim that takes such rows to the least of them, since
-- the partitioned form's update reads only the partitions from it up too.
--
-- The swept branch comes first: rows $10 that a look below the floor
-- found (look_below.sql), taken by id from the primary key if they are
-- still due pending rows or lapsed leases, so that a claim that takes
-- them reads no dead entries either. The status test is wrapped in
-- IS TRUE so that the planner cannot read a partial index for it (see
-- mark_sent.sql); $10 NULL or empty folds the branch away.
--
-- The UPDATE finds the picked rows by their tuple ids (ctid), a TID
-- scan, which reads each row's heap page and no index: less time than a
-- join by primary key, which probes pkey for each row
-- (docs/benchmarks.md#default-settings-adaptive-batches).
-- The rows are locked by then, so their versions, and tuple ids, stay.
-- On a partitioned table a tuple id names a row in each partition, so
-- there loadStatements makes its first and last lines
--   UPDATE {{table}} AS o ... FROM taken WHERE o.id = taken.id
--     AND ($11::uuid IS NULL OR o.id >= $11)
--   RETURNING ..., NULL::tid
-- (claimPartitioned). ONLY keeps the first from ever updating a partitioned
-- table: there it updates nothing, where without ONLY it would update the
-- rows at those tuple ids in every partition.
--
-- What the relay holds is bounded before any payload is read (Config.
-- BatchBytes, MaxEventBytes). Each branch measures its rows (size:
-- payload, key and headers as stored, none of them read), and taken
-- keeps the rows picked, in the order the LIMIT took them, up to the row
-- at which their sizes reach $12: at least one row, and the rows past it
-- stay as they are. A row above $13 counts for nothing there,
-- and is returned without its key, payload and headers, with its size,
-- for the relay to fail.
WITH picked AS (
    SELECT id, ctid, size FROM (
        SELECT id, ctid, octet_length(payload) + coalesce(octet_length(key), 0) + pg_column_size(headers) AS size
        FROM {{table}}
        WHERE cardinality($10::uuid[]) > 0
          AND id = ANY($10::uuid[])
          AND ((status = 'pending' AND next_retry_at <= now())
               OR (status = 'processing' AND locked_until < now())) IS TRUE
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS swept
    UNION ALL
    SELECT id, ctid, size FROM (
        SELECT id, ctid, octet_length(payload) + coalesce(octet_length(key), 0) + pg_column_size(headers) AS size
        FROM {{table}}
        WHERE $8::bool
          AND status = 'processing'
          AND locked_until < now()
          AND ($9::bigint IS NULL OR locked_until >= now() - $9 * interval '1 millisecond')
          AND ($11::uuid IS NULL OR id >= $11)
          AND NOT (bucket IS NOT NULL AND ($6::bool OR topic = ANY($7::text[])))
        ORDER BY locked_until
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS expired
    UNION ALL
    SELECT id, ctid, size FROM (
        SELECT id, ctid, octet_length(payload) + coalesce(octet_length(key), 0) + pg_column_size(headers) AS size
        FROM {{table}}
        WHERE status = 'pending'
          AND next_retry_at <= now()
          AND (next_retry_at, id) >= ($4, $5)
          AND ($11::uuid IS NULL OR id >= $11)
          AND NOT (bucket IS NOT NULL AND ($6::bool OR topic = ANY($7::text[])))
        ORDER BY next_retry_at, id
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS due
    LIMIT $1
),
taken AS (
    SELECT id, ctid
    FROM (
        SELECT id, ctid,
               sum(size) FILTER (WHERE size <= $13)
                   OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
        FROM picked
    ) AS p
    WHERE coalesce(before, 0) < $12
),
leased AS (
    UPDATE ONLY {{table}} AS o
    SET status = 'processing',
        locked_by = $2,
        locked_until = now() + $3 * interval '1 millisecond',
        attempt = least(o.attempt, 2147483646) + 1
    WHERE o.ctid = ANY (ARRAY(SELECT ctid FROM taken))
    RETURNING o.id, o.topic, o.key, o.payload, o.headers, o.attempt, o.created_at,
              octet_length(o.payload) + coalesce(octet_length(o.key), 0) + pg_column_size(o.headers) AS size,
              o.next_retry_at, o.ctid AS tid
)
SELECT id, topic,
       CASE WHEN size <= $13 THEN key END,
       CASE WHEN size <= $13 THEN payload END,
       CASE WHEN size <= $13 THEN headers END,
       attempt, created_at, size, next_retry_at, tid
FROM leased

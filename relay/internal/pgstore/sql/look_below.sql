-- look_below: what a sweep would take, read without locking or writing
-- anything (relay/claim_floor.go): up to @limit rows whose lease ran
-- out, oldest first, up to @limit due pending rows below the floor
-- (@from_due, @from_id), lowest first, and, on a partitioned table, up to
-- @limit due pending rows below the claims' id bound @bound (as in
-- claim.sql; NULL on an unpartitioned table folds the branch away), which
-- the claims do not read: on the partitions older than the bound, which
-- hold few pending rows, if any. Rows of ordered topics (@all_ordered,
-- @ordered_topics) are left out as in claim.sql.
-- The second column says which branch found the row (0, 1, 2).
--
-- Each branch reads its index from its lowest entry, past every dead
-- entry VACUUM has not removed: under a transaction held open anywhere in
-- the database, the dead entries of every row claimed and sent since it
-- began. That is why no claim runs this: a relay's looks run on their own,
-- beside its claims, and a claim takes the rows a look found by id, from
-- the primary key (claim.sql's @swept).
SELECT id, 0 FROM (
    SELECT id
    FROM {{table}}
    WHERE status = 'processing'
      AND locked_until < now()
      AND NOT (bucket IS NOT NULL AND (@all_ordered::bool OR topic LIKE ANY(@ordered_topics::text[])))
    ORDER BY locked_until
    LIMIT @limit
) AS lapsed
UNION ALL
SELECT id, 1 FROM (
    SELECT id
    FROM {{table}}
    WHERE status = 'pending'
      AND next_retry_at <= now()
      AND (next_retry_at, id) < (@from_due, @from_id)
      AND NOT (bucket IS NOT NULL AND (@all_ordered::bool OR topic LIKE ANY(@ordered_topics::text[])))
    ORDER BY next_retry_at, id
    LIMIT @limit
) AS below
UNION ALL
SELECT id, 2 FROM (
    SELECT id
    FROM {{table}}
    WHERE @bound::uuid IS NOT NULL
      AND id < @bound
      AND status = 'pending'
      AND next_retry_at <= now()
      AND NOT (bucket IS NOT NULL AND (@all_ordered::bool OR topic LIKE ANY(@ordered_topics::text[])))
    ORDER BY next_retry_at, id
    LIMIT @limit
) AS older

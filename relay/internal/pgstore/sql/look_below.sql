-- look_below: what a sweep would take, read without locking or writing
-- anything (relay/claim_floor.go): up to $1 rows whose lease ran out, oldest
-- first, up to $1 due pending rows below the floor ($2, $3), lowest
-- first, and, on a partitioned table, up to $1 due pending rows below the
-- claims' id bound $6 (claim.sql's $11; NULL on an unpartitioned table
-- folds the branch away), which the claims do not read: on the partitions
-- older than the bound, which hold few pending rows, if any. Rows of
-- ordered topics ($4, $5) are left out as in claim.sql.
-- The second column says which branch found the row (0, 1, 2).
--
-- Each branch reads its index from its lowest entry, past every dead
-- entry VACUUM has not removed: under a transaction held open anywhere in
-- the database, the dead entries of every row claimed and sent since it
-- began. That is why no claim runs this: a relay's looks run on their own,
-- beside its claims, and a claim takes the rows a look found by id, from
-- the primary key (claim.sql, $10).
SELECT id, 0 FROM (
    SELECT id
    FROM {{table}}
    WHERE status = 'processing'
      AND locked_until < now()
      AND NOT (bucket IS NOT NULL AND ($4::bool OR topic = ANY($5::text[])))
    ORDER BY locked_until
    LIMIT $1
) AS lapsed
UNION ALL
SELECT id, 1 FROM (
    SELECT id
    FROM {{table}}
    WHERE status = 'pending'
      AND next_retry_at <= now()
      AND (next_retry_at, id) < ($2, $3)
      AND NOT (bucket IS NOT NULL AND ($4::bool OR topic = ANY($5::text[])))
    ORDER BY next_retry_at, id
    LIMIT $1
) AS below
UNION ALL
SELECT id, 2 FROM (
    SELECT id
    FROM {{table}}
    WHERE $6::uuid IS NOT NULL
      AND id < $6
      AND status = 'pending'
      AND next_retry_at <= now()
      AND NOT (bucket IS NOT NULL AND ($4::bool OR topic = ANY($5::text[])))
    ORDER BY next_retry_at, id
    LIMIT $1
) AS older

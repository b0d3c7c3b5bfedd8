-- release: rows @ids go back without spending the attempt: claimable at
-- once (next_retry_at was already due when claimed). Fenced by the claim
-- @owner.
-- The status test reads "(status = 'processing') IS TRUE", which is the
-- same for a column that is never NULL but keeps the planner from reading
-- processing_idx for it: that index keeps a dead entry for every row sent
-- until a VACUUM, which a long transaction anywhere in the database holds
-- off, and with statistics that counted few processing rows the planner
-- preferred walking all of them to the primary-key look-ups of the ids.
-- The ids lie between @lo and @hi (their least and greatest, which the
-- relay passes along): on a partitioned table that range lets PostgreSQL
-- leave out, when the statement starts, every partition that cannot hold
-- them, where "= ANY" alone would look each id up in every partition.
UPDATE {{table}}
SET status = 'pending',
    attempt = attempt - 1,
    locked_until = NULL
WHERE id = ANY(@ids)
  AND id BETWEEN @lo AND @hi
  AND locked_by = @owner
  AND (status = 'processing') IS TRUE

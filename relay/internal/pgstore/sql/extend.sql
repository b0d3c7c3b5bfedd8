-- extend: renews the lease (@lease_ms ms) of the rows @ids the claim
-- @owner still holds; the rows it no longer holds are the ones lost.
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
SET locked_until = now() + @lease_ms * interval '1 millisecond'
WHERE id = ANY(@ids)
  AND id BETWEEN @lo AND @hi
  AND locked_by = @owner
  AND (status = 'processing') IS TRUE

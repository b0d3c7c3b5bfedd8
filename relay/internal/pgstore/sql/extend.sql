-- extend: renews the lease ($3 ms) of the rows $1 the claim $2 still
-- holds; the rows it no longer holds are the ones lost.
-- The status test reads "(status = 'processing') IS TRUE", which is the
-- same for a column that is never NULL but keeps the planner from reading
-- processing_idx for it: that index keeps a dead entry for every row sent
-- until a VACUUM, which a long transaction anywhere in the database holds
-- off, and with statistics that counted few processing rows the planner
-- preferred walking all of them to the primary-key look-ups of the ids.
-- The ids lie between $4 and $5 (their least and greatest, which the
-- relay passes along): on a partitioned table that range lets PostgreSQL
-- leave out, when the statement starts, every partition that cannot hold
-- them, where "= ANY" alone would look each id up in every partition.
UPDATE {{table}}
SET locked_until = now() + $3 * interval '1 millisecond'
WHERE id = ANY($1)
  AND id BETWEEN $4 AND $5
  AND locked_by = $2
  AND (status = 'processing') IS TRUE

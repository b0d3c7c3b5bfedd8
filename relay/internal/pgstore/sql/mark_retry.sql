-- mark_retry: rows go back to pending until their delay (ms) has passed.
-- A refund of 1 gives the attempt back: the sink was down, the message
-- was not at fault. Fenced by the claim $5.
-- The status test reads "(status = 'processing') IS TRUE", which is the
-- same for a column that is never NULL but keeps the planner from reading
-- processing_idx for it: that index keeps a dead entry for every row sent
-- until a VACUUM, which a long transaction anywhere in the database holds
-- off, and with statistics that counted few processing rows the planner
-- preferred walking all of them to the primary-key look-ups of the ids.
-- The ids lie between $6 and $7 (their least and greatest, which the
-- relay passes along): on a partitioned table that range lets PostgreSQL
-- leave out, when the statement starts, every partition that cannot hold
-- them, where "= ANY" alone would look each id up in every partition.
-- The ids are named by "= ANY" besides the join to their values: with
-- the join alone and statistics that count few processing rows (the
-- usual count when ANALYZE runs), the planner estimated the rows at one
-- and read the whole table, comparing each row with every id
-- (TestRetryWriteBacksLookUpRowsByID).
UPDATE {{table}} AS o
SET status = 'pending',
    next_retry_at = now() + r.delay_ms * interval '1 millisecond',
    attempt = o.attempt - r.refund,
    last_error = r.error,
    locked_until = NULL
FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[]) AS r(id, delay_ms, error, refund)
WHERE o.id = r.id
  AND o.id = ANY ($1::uuid[])
  AND o.id BETWEEN $6 AND $7
  AND o.locked_by = $5
  AND (o.status = 'processing') IS TRUE

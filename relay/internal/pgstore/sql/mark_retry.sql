-- mark_retry: rows @ids go back to pending until their delay (@delays,
-- ms) has passed, with their error (@errors). A refund (@refunds) of 1
-- gives the attempt back: the sink was down, the message was not at
-- fault. Fenced by the claim @owner.
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
FROM unnest(@ids::uuid[], @delays::bigint[], @errors::text[], @refunds::int[]) AS r(id, delay_ms, error, refund)
WHERE o.id = r.id
  AND o.id = ANY (@ids::uuid[])
  AND o.id BETWEEN @lo AND @hi
  AND o.locked_by = @owner
  AND (o.status = 'processing') IS TRUE

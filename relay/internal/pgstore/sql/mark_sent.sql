-- mark_sent: rows @ids the sink acknowledged are sent. Like every lease
-- write-back it is fenced: it touches only rows the claim @owner still
-- holds.
-- locked_by is kept as a record of who handled the row last.
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
SET status = 'sent',
    sent_at = now(),
    locked_until = NULL,
    last_error = NULL
WHERE id = ANY(@ids)
  AND id BETWEEN @lo AND @hi
  AND locked_by = @owner
  AND (status = 'processing') IS TRUE

-- mark_sent_by_tid: mark_sent.sql for a lease claim @owner whose every
-- row the sink acknowledged and whose lease was never extended, on a
-- plain table. It finds the rows by the tuple ids @tids the claim
-- returned (a TID scan, which reads each row's heap page and no index),
-- where mark_sent looks each id up in the primary key: less time
-- (docs/benchmarks.md#default-settings-adaptive-batches).
-- Why it touches exactly the claim's rows: a row the claim still holds
-- has not changed since the claim wrote it (only an extension, which the
-- relay then marks by id instead, changes a held row), so its version is
-- where the claim left it; and a tuple that passes the fence, held by
-- the claim's token in processing, is one of the claim's rows, all of
-- which were acknowledged. A tuple id that no longer names such a row (another
-- claim took it after its lease ran out) matches nothing: fenced.
-- The tuple ids are passed through a sub-select, as the claim passes
-- its own: given the array itself, the planner counts its elements and,
-- on a table of fewer pages than four times their number, reads the
-- whole table instead, which is slower (TestMarkSentByTupleIDIsATIDScan).
-- The status test is wrapped like mark_sent's (see there).
UPDATE ONLY {{table}}
SET status = 'sent',
    sent_at = now(),
    locked_until = NULL,
    last_error = NULL
WHERE ctid = ANY (ARRAY(SELECT unnest(@tids::tid[])))
  AND locked_by = @owner
  AND (status = 'processing') IS TRUE

-- due_keyless: whether the unordered claim may find a row when every
-- topic is ordered: a due row without seq (keyless, or written before
-- the ordered trigger) or a lapsed lease.
SELECT EXISTS (
           SELECT 1
           FROM {{table}} FORCE INDEX (ordered_idx)
           WHERE status = 'pending'
             AND bucket IS NULL
             AND next_retry_at <= UTC_TIMESTAMP(6)
       )
       OR EXISTS (
           SELECT 1
           FROM {{table}} FORCE INDEX (lapsed_idx)
           WHERE status = 'processing'
             AND locked_until < UTC_TIMESTAMP(6)
       )

-- due_keyless: whether the unordered claim (claim.sql) may find a row to
-- take when every topic is ordered, so that it takes keyless rows only: a
-- due keyless pending row (keyless_idx) or a lapsed lease
-- (processing_idx). It plans in a fraction of the claim's time; a worker
-- whose last claim found nothing asks it first (streamClaims.claim), so
-- that the unordered workers of a relay whose events are all keyed and
-- ordered poll for little.
SELECT EXISTS (
           SELECT 1
           FROM {{table}}
           WHERE status = 'pending'
             AND bucket IS NULL
             AND next_retry_at <= now()
       )
       OR EXISTS (
           SELECT 1
           FROM {{table}}
           WHERE status = 'processing'
             AND locked_until < now()
       )

-- status_holders: the processing rows by the relay that holds them (the
-- replica id, locked_by without its "#<n>" claim number), through
-- processing_idx: how many rows, in how many claims, and the first and
-- last of their lease ends, in seconds from now (negative: lapsed). Lock
-- claims (--claim-mode lock) write nothing to the rows they hold and do
-- not appear here.
SELECT split_part(locked_by, '#', 1) AS relay,
       count(*),
       count(DISTINCT locked_by),
       extract(epoch FROM min(locked_until) - now())::float8,
       extract(epoch FROM max(locked_until) - now())::float8
FROM {{table}}
WHERE status = 'processing'
GROUP BY 1
ORDER BY 1

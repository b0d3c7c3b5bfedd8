-- ordered_buckets: the later reads of an ordered claim
-- (docs/ordering.md#the-ordered-claim), which only read: the buckets
-- @buckets, in that order, each from its oldest pending row below the
-- visibility horizon, up to @per_bucket rows of each and @total in all
-- (the nested loop reads the buckets in the order of the array and stops
-- at the LIMIT). A row is ready when it is due and of an ordered topic
-- (@all_topics, or one the LIKE patterns @topics match); each row comes
-- with its tuple id, as in ordered_head.sql. Each bucket's read is a
-- range of ordered_pending_idx with a LIMIT, the tests the index cannot
-- answer (topic, due) made on the rows read, so that what it reads is
-- bounded whatever the bucket holds.
SELECT b.bucket, p.id, p.topic, p.key, (p.tx::text)::bigint, p.ready, p.ctid
FROM unnest(@buckets::smallint[]) AS b (bucket)
CROSS JOIN LATERAL (
    SELECT o.id, o.topic, o.key, o.tx, o.ctid,
           o.next_retry_at <= now()
           AND (@all_topics::bool OR o.topic LIKE ANY(@topics::text[])) AS ready
    FROM {{table}} AS o
    WHERE o.bucket = b.bucket
      AND o.status = 'pending'
      AND o.bucket IS NOT NULL
      AND o.tx < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY o.tx, o.id
    LIMIT @per_bucket
) AS p
LIMIT @total

-- 005 down: the ordered index covers processing rows again, as 002 made it.
CREATE INDEX IF NOT EXISTS {{name "ordered_idx"}}
    ON {{.Table}} (bucket, tx, id)
    WHERE status IN ('pending', 'processing') AND bucket IS NOT NULL;

DROP INDEX IF EXISTS {{schema}}.{{name "ordered_pending_idx"}};

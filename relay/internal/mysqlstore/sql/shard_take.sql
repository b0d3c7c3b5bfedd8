-- shard_take: a claim of shard ? took the rows whose ids are ? (16 bytes
-- each): it renews the lease by ? ms, notes them (the write-back clears
-- them, the next lease counts their attempt) and the last key it looked
-- at (?, ?, ?).
UPDATE {{shards}}
SET locked_until = UTC_TIMESTAMP(6) + INTERVAL ? * 1000 MICROSECOND,
    claimed = ?,
    cur_bucket = ?,
    cur_khash = ?,
    cur_topic = ?
WHERE shard = ?

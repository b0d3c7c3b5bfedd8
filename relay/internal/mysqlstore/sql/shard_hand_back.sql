-- shard_hand_back: returns shard ? held by ?; locked_until = now puts it
-- last in the least-recently-served order. claimed stays: the next lease
-- counts the attempt of rows without outcome.
UPDATE {{shards}}
SET locked_by = NULL,
    locked_until = UTC_TIMESTAMP(6)
WHERE shard = ?
  AND locked_by = ?

-- shard_held: locks shard ? if ? holds its lease (a write-back, fenced by
-- the lease: a takeover waits for it and sees its outcome), and returns
-- the key after which its next claim starts.
SELECT cur_bucket, cur_khash, cur_topic
FROM {{shards}}
WHERE shard = ?
  AND locked_by = ?
FOR UPDATE

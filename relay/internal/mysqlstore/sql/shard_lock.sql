-- shard_lock: locks shard ? for a lease if its lease ended and no other
-- lease or write-back holds it, and returns the ids noted as claimed.
SELECT claimed
FROM {{shards}}
WHERE shard = ?
  AND locked_until < UTC_TIMESTAMP(6)
FOR UPDATE SKIP LOCKED

-- record_ordered_shard: after a write-back, shard ? notes only the ids
-- (16 bytes each, or NULL) whose publish had no outcome.
UPDATE {{shards}}
SET claimed = ?
WHERE shard = ?

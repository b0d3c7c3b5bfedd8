-- 009 down: the column goes, and with it a 009 replica's ordered claims,
-- which fail from then on (they name it); 008 replicas mark rows
-- processing again.
ALTER TABLE {{related "shard_ranges"}} DROP COLUMN IF EXISTS claimed;
ALTER TABLE {{related "shard_ranges"}} DROP COLUMN IF EXISTS floor_tx;

-- 009: an ordered claim reads its rows instead of marking them processing
-- (docs/ordering.md#claims-that-read). The shard's lease already makes its
-- holder the only claimant of the shard's keys; what the row update still
-- did was count the attempt, in case the holder died while publishing.
-- claimed keeps that count: the claim writes the ids it took here, the
-- outcome's write-back clears them, and whoever leases the shard while
-- ids are left counts an attempt for each of them that is still pending.
--
-- Replicas of 008 and of 009 can serve the table side by side: both lease
-- through this table, and a 009 claim takes over a lapsed 008 claim's
-- rows (processing) as its own. An 008 replica ignores claimed: when it
-- takes the shard of a 009 holder that died, that batch's attempt goes
-- uncounted.
ALTER TABLE {{related "shard_ranges"}} ADD COLUMN IF NOT EXISTS claimed uuid[];

-- The shard's floor: no row of its buckets is pending with a writing
-- transaction below it, unless an operator made it pending again (relay
-- failed retry, relay replay), which clears every shard's floor in the
-- same statement. Each claim raises it to the oldest unfinished row of
-- its buckets, of any topic, or the oldest running transaction if that is
-- older, and the claim's and the lease's probes of a bucket start there
-- instead of walking the index entries of the rows sent since the last
-- VACUUM. NULL: no floor.
ALTER TABLE {{related "shard_ranges"}} ADD COLUMN IF NOT EXISTS floor_tx xid8;

-- now: the database clock in UTC, the only clock: relative times given to
-- the admin commands ("failed in the last 2h") are measured back from it.
SELECT UTC_TIMESTAMP(6)

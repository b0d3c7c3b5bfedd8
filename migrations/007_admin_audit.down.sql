-- 007 down: drops the admin commands' audit trail and every entry in it.
DROP TABLE {{related "audit"}};

-- 003 down: inserts stop notifying; relays fall back to polling.
DROP TRIGGER {{name "notify"}} ON {{.Table}};
DROP FUNCTION {{related "notify"}}();

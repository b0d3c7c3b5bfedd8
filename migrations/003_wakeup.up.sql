-- 003: wake-up by notification. Every statement that inserts into the
-- table notifies a channel named after it; PostgreSQL delivers the
-- notification when the transaction commits, and only once per transaction
-- however many statements sent it. Relays LISTEN on the channel and claim at
-- once instead of at their next poll (polling stays as the fallback).
--
-- The channel is the schema name, a dot and the table name; a channel name
-- longer than PostgreSQL's 63-byte limit is cut to 54 bytes, an underscore
-- and 8 hex digits of its md5 (outbox.Table.Channel computes the same). To write without notifying
-- (see docs/benchmarks.md for what NOTIFY costs writers):
--   ALTER TABLE <table> DISABLE TRIGGER <table>_notify;
CREATE FUNCTION {{related "notify"}}() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel text := TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME;
BEGIN
    IF octet_length(channel) > 63 THEN
        channel := left(channel, 54) || '_' || left(md5(channel), 8);
    END IF;
    PERFORM pg_notify(channel, '');
    RETURN NULL;
END
$$;

CREATE TRIGGER {{name "notify"}}
    AFTER INSERT ON {{.Table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{related "notify"}}();

-- 006: a default for id, so that writers using plain SQL (other languages,
-- psql, triggers, stored procedures) can insert with
--   INSERT INTO outbox (topic, key, payload) VALUES (...)
-- and still get ids that order a transaction's events in insertion order:
-- ordered delivery sorts one key's events by (tx, id), so ids written by one
-- transaction must increase in the order of its inserts. Random ids
-- (gen_random_uuid) do not; neither do time-ordered ids whose low bits are
-- random, for inserts made in the same millisecond. Writers that give an id
-- (the Go writer does) never run the default. See
-- docs/architecture.md#writing-with-plain-sql and
-- docs/ordering.md#what-the-order-they-were-written-means.
--
-- On a large live table: no statement here rewrites or scans the table.
-- SET DEFAULT only changes the catalog (rows already in the table keep their
-- ids), but it takes an ACCESS EXCLUSIVE lock on the table for that moment,
-- and must first wait for every transaction that holds any lock on the
-- table, while queueing the table's readers and writers behind it. With
-- long transactions on the table, run the migration with a lock_timeout
-- (docs/architecture.md#migrations).

-- The low 62 bits of every id: strictly increasing in the order of the
-- calls within one session, and unique across sessions. 2^62 values never
-- run out.
CREATE SEQUENCE {{related "id_seq"}}
    AS bigint
    MAXVALUE 4611686018427387903
    OWNED BY {{.Table}}.id;

-- Roles that may insert into the table need not be granted the sequence:
-- nextval on it only hands out numbers.
GRANT USAGE ON SEQUENCE {{related "id_seq"}} TO PUBLIC;

-- A UUID in the layout of version 7 (RFC 9562), as the Go writer's
-- uuid.NewV7 makes them:
--   48 bits  unix time in milliseconds: the database clock at the insert
--            (clock_timestamp(), not the transaction start)
--    4 bits  version, 7
--   12 bits  the fraction of the millisecond, in units of 256 ns,
--            as google/uuid does
--    2 bits  variant, 10
--   62 bits  nextval of the sequence above
-- Within one transaction the time (the first 60 bits) never goes back, even
-- if the server's clock does: the latest time used is kept in a
-- transaction-local setting, outboxrelay.id_time (shared by every outbox
-- table's function; that only makes it stricter), and an earlier clock
-- reading is replaced by it. Equal times are ordered by the sequence, so a
-- transaction's ids strictly increase in insertion order.
CREATE FUNCTION {{related "new_id"}}() RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    us     bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    t      bigint := ((us / 1000) << 12) | (((us % 1000) * 1000) >> 8);
    latest bigint := nullif(current_setting('outboxrelay.id_time', true), '')::bigint;
BEGIN
    IF t < latest THEN
        t := latest;
    ELSE
        PERFORM set_config('outboxrelay.id_time', t::text, true);
    END IF;
    RETURN encode(
        int8send(((t >> 12) << 16) | (7 << 12) | (t & 4095))
        || int8send((1::bigint << 63) | nextval('{{related "id_seq"}}')),
        'hex')::uuid;
END
$$;

ALTER TABLE {{.Table}}
    ALTER COLUMN id SET DEFAULT {{related "new_id"}}();

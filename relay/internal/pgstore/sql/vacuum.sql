-- vacuum: reclaims the space of deleted rows and refreshes the table's
-- statistics. SKIP_LOCKED skips the table while another VACUUM, or DDL,
-- holds a conflicting lock, rather than wait for it. TRUNCATE false:
-- the empty pages at the end of an outbox table fill again at once, and
-- giving them back takes an ACCESS EXCLUSIVE lock, which VACUUM tries for
-- up to 5 s while it holds its own, every claim and write on the table in
-- the way and every other VACUUM of it waiting (a hot standby also replays
-- that lock and cancels the queries it conflicts with).
VACUUM (SKIP_LOCKED, ANALYZE, TRUNCATE false) {{table}}

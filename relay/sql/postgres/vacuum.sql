-- vacuum: reclaims the space of deleted rows and refreshes the table's
-- statistics. SKIP_LOCKED skips the table while another VACUUM, or DDL,
-- holds a conflicting lock, rather than wait for it.
VACUUM (SKIP_LOCKED, ANALYZE) {{table}}

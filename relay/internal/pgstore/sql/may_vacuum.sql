-- may_vacuum: whether the session's role may VACUUM the table: it has the
-- privileges of the table's owner or of the database's (superusers have
-- every role's), or, from PostgreSQL 17, MAINTAIN on the table. Any other
-- role's VACUUM skips the table with a WARNING and succeeds. The CASE
-- keeps 'MAINTAIN', unknown before 17, from being parsed there.
SELECT pg_has_role(c.relowner, 'USAGE')
    OR pg_has_role(d.datdba, 'USAGE')
    OR CASE WHEN current_setting('server_version_num')::int >= 170000
        THEN has_table_privilege(c.oid, 'MAINTAIN')
        ELSE false
    END
FROM pg_class AS c
JOIN pg_database AS d ON d.datname = current_database()
WHERE c.oid = '{{table}}'::regclass

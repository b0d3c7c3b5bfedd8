-- 004 down (MySQL/MariaDB): id has no default again; every writer must
-- give one. Ids already made by the default stay.
ALTER TABLE {{.Table}}
    ALTER COLUMN id DROP DEFAULT;

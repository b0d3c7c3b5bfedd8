-- 006 down: id has no default again; every writer must give one.
ALTER TABLE {{.Table}}
    ALTER COLUMN id DROP DEFAULT;
DROP FUNCTION {{related "new_id"}}();
DROP SEQUENCE {{related "id_seq"}};

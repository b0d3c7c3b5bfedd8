-- 001 down: drops the outbox table and every event in it.
DROP TABLE {{.Table}};
{{if .Partitioned}}DROP TABLE {{related "dedup"}};
DROP FUNCTION {{related "dedup_insert"}}();
DROP FUNCTION {{related "dedup_delete"}}();
{{end}}

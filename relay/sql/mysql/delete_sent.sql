-- delete_sent: deletes the rows $1 (a JSON array of hex ids) pick_sent.sql
-- locked, each by primary key.
DELETE o
FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) PATH '$')) AS j
STRAIGHT_JOIN {{table}} AS o FORCE INDEX (PRIMARY) ON o.id = UNHEX(j.id)
WHERE o.status = 'sent'

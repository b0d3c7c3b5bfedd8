-- delete_sent: deletes the rows {{ids}} pick_sent.sql locked, each by
-- primary key. It is written as a multi-table DELETE of one table because
-- only that form takes an index hint; with one table the rows are deleted
-- as they are found, without a temporary table.
DELETE o
FROM {{table}} AS o FORCE INDEX (PRIMARY)
WHERE o.id IN ({{ids}})
  AND o.status = 'sent'

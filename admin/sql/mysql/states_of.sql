-- states_of: the state of each of the rows {{ids}} that the table still
-- holds, by primary key; ids it does not hold are not returned. Actions by
-- id report with it which ids they left alone, and why.
SELECT id, status
FROM {{table}}
WHERE id IN ({{ids}})

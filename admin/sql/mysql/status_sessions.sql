-- status_sessions: the relays connected to this database now, when the
-- server has the performance schema on: sessions whose program_name
-- connection attribute starts with the first parameter, which relay run
-- sets to that prefix and its replica id, for any outbox table of the
-- database (the second parameter; NULL: the connection's). How many
-- sessions each has, and from which hosts. MySQL keeps no time a session
-- connected at, so there is no "since". Without the PROCESS privilege a
-- user sees only its own sessions.
SELECT SUBSTRING(a.ATTR_VALUE, CHAR_LENGTH(?) + 1) AS relay,
       COUNT(DISTINCT p.ID),
       COALESCE(GROUP_CONCAT(DISTINCT SUBSTRING_INDEX(p.HOST, ':', 1) ORDER BY SUBSTRING_INDEX(p.HOST, ':', 1) SEPARATOR ','), '')
FROM performance_schema.session_connect_attrs AS a
JOIN information_schema.PROCESSLIST AS p ON p.ID = a.PROCESSLIST_ID
WHERE a.ATTR_NAME = 'program_name'
  AND LEFT(a.ATTR_VALUE, CHAR_LENGTH(?)) = ?
  AND p.DB = COALESCE(?, DATABASE())
GROUP BY relay
ORDER BY relay

-- status_sessions: the relays connected to this database now: sessions
-- whose application_name starts with $1, which relay run sets to that
-- prefix and its replica id, for any outbox table of the database. How
-- many sessions each has, since when (s), and from where. Any role sees
-- application_name; other roles' client addresses are hidden unless it
-- has pg_read_all_stats.
SELECT substr(application_name, length($1::text) + 1) AS relay,
       count(*),
       extract(epoch FROM now() - min(backend_start))::float8,
       coalesce(string_agg(DISTINCT host(client_addr), ',' ORDER BY host(client_addr)), '')
FROM pg_stat_activity
WHERE datname = current_database()
  AND starts_with(application_name, $1::text)
GROUP BY 1
ORDER BY 1

-- status_senders: the relays that sent the most recently sent rows (the
-- parameter: how many; locked_by keeps the claim that sent a row), read
-- backwards from the end of sent_idx: how many of them each sent, and how
-- long ago its latest was sent (s). A bounded sample.
SELECT SUBSTRING_INDEX(locked_by, '#', 1) AS relay,
       COUNT(*),
       TIMESTAMPDIFF(MICROSECOND, MAX(sent_at), UTC_TIMESTAMP(6)) / 1e6 AS last_sent
FROM (
    SELECT locked_by, sent_at
    FROM {{table}} FORCE INDEX (sent_idx)
    WHERE status = 'sent'
    ORDER BY sent_at DESC
    LIMIT ?
) AS recent
WHERE locked_by IS NOT NULL
GROUP BY relay
ORDER BY last_sent, relay

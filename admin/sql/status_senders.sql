-- status_senders: the relays that sent the $1 most recently sent rows
-- (locked_by keeps the claim that sent a row), read backwards from the
-- end of sent_idx: how many of them each sent, and how long ago its
-- latest was sent (s). A bounded sample: it costs $1 index entries and
-- rows however busy the table is.
SELECT split_part(locked_by, '#', 1) AS relay,
       count(*),
       extract(epoch FROM now() - max(sent_at))::float8
FROM (
    SELECT locked_by, sent_at
    FROM {{table}}
    WHERE status = 'sent'
    ORDER BY sent_at DESC
    LIMIT $1
) AS recent
WHERE locked_by IS NOT NULL
GROUP BY 1
ORDER BY 3, 1

-- ordered_in_use: whether ordered delivery has served this table: the
-- relays create the shard rows (002) when they start with ordered topics.
-- Retried and replayed rows then take a place in their key's order
-- (docs/ordering.md#replaying-sent-events).
SELECT EXISTS (SELECT 1 FROM {{shards}})

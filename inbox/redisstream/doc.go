// Package redisstream reads the entries of the relay's Redis Streams sink
// (publishers/redisstream), as github.com/redis/go-redis/v9 delivers them,
// into inbox.Message, so that a consumer applies each event once with
// package inbox.
//
// Message maps a redis.XMessage, and the stream it was read from, to an
// inbox.Message:
//
//   - ID: the event_id field (inbox.ParseID);
//   - Topic: the stream's key, the sink's StreamPrefix included;
//   - Key: the key field, byte for byte; nil when absent;
//   - CreatedAt: the created_at field (RFC 3339, nanoseconds, UTC); zero
//     when absent;
//   - Headers: the headers field, a JSON object of strings;
//   - Payload: the payload field.
//
// An entry without a valid event id (not written by the relay) gives an
// error wrapping inbox.ErrNoEventID.
//
// Read with a consumer group and acknowledge an entry (XACK) once Handle
// returned nil, duplicate or not:
//
//	streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
//		Group: "billing", Consumer: host, Streams: []string{"orders", ">"},
//	}).Result()
//	if err != nil {
//		return err
//	}
//	for _, s := range streams {
//		for _, e := range s.Messages {
//			m, err := redisstream.Message(s.Stream, e)
//			if err != nil {
//				return err // or XACK it: not an entry of the relay
//			}
//			if _, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
//				return apply(ctx, tx, m)
//			}); err != nil {
//				return err // left pending: XAUTOCLAIM or a restart reads it again
//			}
//			if err := rdb.XAck(ctx, s.Stream, "billing", e.ID).Err(); err != nil {
//				return err
//			}
//		}
//	}
package redisstream

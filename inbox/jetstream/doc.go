// Package jetstream reads the messages of the relay's NATS sink
// (publishers/nats), as github.com/nats-io/nats.go delivers them, into
// inbox.Message, so that a consumer applies each event once with package
// inbox.
//
// Message maps a jetstream.Msg (and CoreMessage a *nats.Msg) to an
// inbox.Message:
//
//   - ID: the outbox-event-id header (inbox.ParseID);
//   - Topic: the subject;
//   - Key: the outbox-key header as it is, or the outbox-key-base64 header
//     decoded; nil when neither is there (an empty key is outbox-key with
//     an empty value);
//   - CreatedAt: zero, as the sink does not send it;
//   - Headers: every other header but the sink's and the server's
//     (outbox-event-id, outbox-key, outbox-key-base64, Nats-Msg-Id and
//     any other Nats-*), first value of each;
//   - Payload: the data.
//
// A message without a valid event id (not published by the relay) gives
// an error wrapping inbox.ErrNoEventID.
//
// Acknowledge a message once Handle returned nil, duplicate or not (the
// package's name clashes with nats.go's, hence inboxjs):
//
//	cc, err := cons.Consume(func(msg jetstream.Msg) {
//		m, err := inboxjs.Message(msg)
//		if err != nil {
//			_ = msg.Term() // not an event of the relay
//			return
//		}
//		if _, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
//			return apply(ctx, tx, m)
//		}); err != nil {
//			_ = msg.Nak() // redelivered later
//			return
//		}
//		_ = msg.Ack()
//	})
package jetstream

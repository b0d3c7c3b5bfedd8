// Package kafkago reads the records of the relay's Kafka sink
// (publishers/kafka), as github.com/segmentio/kafka-go delivers them, into
// inbox.Message, so that a consumer applies each event once with package
// inbox.
//
// Message maps a kafka.Message to an inbox.Message:
//
//   - ID: the outbox-event-id header (inbox.ParseID);
//   - Topic: the record's topic;
//   - Key: the record's key; nil stays nil, but kafka-go's Reader also
//     reads an empty key as nil;
//   - CreatedAt: zero, as the sink does not send it (the record's
//     timestamp is the time it was produced);
//   - Headers: every other header;
//   - Payload: the record's value.
//
// A record without a valid event id (not published by the relay) gives an
// error wrapping inbox.ErrNoEventID.
//
// With a Reader of a consumer group, commit a record once Handle returned
// nil, whether or not it was a duplicate (a short ReaderConfig.MaxWait,
// such as 500ms, keeps Close from waiting out a pending fetch, 10s by
// default):
//
//	for {
//		km, err := r.FetchMessage(ctx)
//		if err != nil {
//			return err
//		}
//		m, err := kafkago.Message(km)
//		if err != nil {
//			return err // or skip it: not an event of the relay
//		}
//		if _, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
//			return apply(ctx, tx, m)
//		}); err != nil {
//			return err // not committed: the record comes again
//		}
//		if err := r.CommitMessages(ctx, km); err != nil {
//			return err
//		}
//	}
package kafkago

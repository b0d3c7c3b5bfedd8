// Package franzgo reads the records of the relay's Kafka sink
// (publishers/kafka), as github.com/twmb/franz-go delivers them, into
// inbox.Message, so that a consumer applies each event once with package
// inbox.
//
// Message maps a *kgo.Record to an inbox.Message:
//
//   - ID: the outbox-event-id header (inbox.ParseID);
//   - Topic: the record's topic;
//   - Key: the record's key (nil for no key, empty for an empty key);
//   - CreatedAt: zero, as the sink does not send it (the record's
//     timestamp is the time it was produced);
//   - Headers: every other header;
//   - Payload: the record's value.
//
// A record without a valid event id (not published by the relay) gives an
// error wrapping inbox.ErrNoEventID.
//
// With a client of a consumer group and kgo.DisableAutoCommit, commit the
// records once Handle returned nil for each, duplicate or not:
//
//	fetches := cl.PollFetches(ctx)
//	if err := fetches.Err(); err != nil {
//		return err
//	}
//	for _, r := range fetches.Records() {
//		m, err := franzgo.Message(r)
//		if err != nil {
//			return err // or skip it: not an event of the relay
//		}
//		if _, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
//			return apply(ctx, tx, m)
//		}); err != nil {
//			return err // not committed: the record comes again
//		}
//	}
//	return cl.CommitUncommittedOffsets(ctx)
package franzgo

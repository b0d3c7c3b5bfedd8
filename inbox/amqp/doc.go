// Package amqp reads the messages of the relay's RabbitMQ sink
// (publishers/rabbitmq), as github.com/rabbitmq/amqp091-go delivers them,
// into inbox.Message, so that a consumer applies each event once with
// package inbox.
//
// Message maps an amqp091.Delivery to an inbox.Message:
//
//   - ID: the outbox-event-id header (inbox.ParseID);
//   - Topic: the routing key (the exchange is the delivery's Exchange);
//   - Key: the outbox-key header, byte for byte; nil when absent;
//   - CreatedAt: the timestamp property, in whole seconds as AMQP carries
//     it, in UTC; zero when unset;
//   - Headers: every other header whose value is a string (the event's
//     are; the broker's own, such as x-delivery-count, are not);
//   - Payload: the body.
//
// A delivery without a valid event id (not published by the relay) gives
// an error wrapping inbox.ErrNoEventID.
//
// Consume without auto-ack, and acknowledge a delivery once Handle
// returned nil, duplicate or not:
//
//	for d := range deliveries {
//		m, err := amqp.Message(d)
//		if err != nil {
//			_ = d.Reject(false) // not an event of the relay: dead-letter it
//			continue
//		}
//		if _, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
//			return apply(ctx, tx, m)
//		}); err != nil {
//			_ = d.Nack(false, true) // back to the queue
//			continue
//		}
//		_ = d.Ack(false)
//	}
package amqp

// Package rabbitmq is the RabbitMQ sink of the relay: a Publisher that
// publishes outbox messages over AMQP 0-9-1 with
// github.com/rabbitmq/amqp091-go, with publisher confirms.
//
// # Destinations
//
// A message's topic names its destination (ParseDestination):
// "exchange/routing-key" publishes to that exchange with that routing key,
// split at the first "/" ("orders/created.eu"; "/invoices" is the default
// exchange, so queue "invoices"; "audit/" is exchange "audit" with the
// empty routing key). A topic without "/" is the routing key on
// Config.Exchange, by default the default exchange "", where the routing
// key names the queue: topic "orders.created" then goes to queue
// "orders.created". The sink declares nothing: exchanges, queues and
// bindings are the operator's.
//
// # Messages
//
// Each outbox message becomes one AMQP message: the payload is the body,
// byte for byte; the outbox headers are headers with string (long string)
// values; the key is header "outbox-key" (HeaderKey), its bytes exactly,
// absent for a nil key; the event id is header "outbox-event-id"
// (outbox.HeaderEventID) and message_id, in canonical UUID form, for
// consumers to drop duplicates; created_at is the timestamp (whole
// seconds). Messages are persistent (delivery mode 2) and published with
// mandatory set.
//
// # Delivery
//
// Publish is synchronous: it returns once the broker confirmed every
// message (publisher confirms: a persistent message routed to a durable
// queue is confirmed once it is written to disk, or its quorum queue's
// majority has it), or it failed. All the messages of one call go on one
// channel in their order, so those routed to one queue arrive in that
// order (per-key order within a call); the channel is pipelined, up to
// MaxInFlight messages ahead of their confirms. Concurrent calls use
// channels of their own on one shared connection. The connection is
// dialed on first use and again, lazily, by the first Publish or Probe
// after it closed.
//
// Before sending, Publish checks each exchange it has not seen yet with a
// passive declare, and remembers those that exist: a missing exchange
// fails only its own messages (RabbitMQ would close the channel, failing
// every message on it).
//
// Everything a Publish call sends is sent before it returns, under its
// context and Config.PublishTimeout; nothing is retried or sent in the
// background. When the context ends, Publish returns at once and sends
// nothing more; a message already written may still be enqueued, its
// outcome unknown, as after any timeout. A write stuck on a broker that
// does not read is broken off with the connection.
//
// # Errors
//
// Publish returns nil, a publishers.Errors with one entry per message, or
// one error for the whole call. Failures are classified for the relay:
//
//   - permanent (publishers.Permanent): the message was returned as
//     unroutable (ReturnedError: "no queue bound to exchange X with routing
//     key Y", since mandatory is set), its exchange does not exist (404),
//     it is larger than MaxMessageBytes or the broker's max_message_size
//     (ErrTooLarge), its topic maps to no valid destination
//     (ErrInvalidDestination), or it has a header an AMQP table cannot hold.
//   - unavailable (publishers.ErrUnavailable): the broker cannot be
//     reached, refuses the connection (authentication, TLS, vhost), or the
//     connection was lost (ErrConnectionLost: the messages not yet
//     confirmed), the publish deadline passed, or the publisher is closed.
//   - transient (anything else): a nack (ErrNacked), a channel closed by
//     another message's fault (ErrChannelClosed), another channel error
//     (e.g. 403 ACCESS_REFUSED on an exchange: an operator's fix away), the
//     caller's cancellation.
//
// A nack, like any transient failure, is retried by the relay later, so a
// nacked message can arrive after a later message of its key that was
// confirmed: per-key order holds within a call for the messages that
// arrive. (The relay's ordered topics publish one event per key per call.)
//
// # Security
//
// An amqps:// URL enables TLS, verified against the system roots, or
// Config.TLS (LoadTLS reads PEM files). Config redacts the password of the
// URL when printed or logged, and no error returned by this package
// contains it.
package rabbitmq

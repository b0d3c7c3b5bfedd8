// Package kafka is the Kafka sink of the relay: a Publisher that writes
// outbox messages to Kafka with github.com/segmentio/kafka-go's Client.
//
// # Records
//
// Each outbox message becomes one record on its Topic: the outbox Key is
// the record key (a nil key stays nil), the payload is the value, and the
// headers are the message's headers sorted by name followed by
// "outbox-event-id" (outbox.HeaderEventID) holding the event id in
// canonical UUID form, which consumers use to drop duplicates. The
// partition is chosen from the key by Config.Partitioner, murmur2 by
// default, so that keyed records land where the Java client would put them.
//
// # Delivery
//
// Publish is synchronous: it returns once the brokers acknowledged every
// record with acks=all, or failed. Messages are grouped by topic and each
// topic is written separately, so that a missing topic fails only its own
// messages. Each partition's messages go in produce requests of at most
// BatchSize messages and MaxMessageBytes bytes, sent at once and one after
// the other; the partitions are written side by side.
//
// Everything a Publish call sends is sent before it returns: requests are
// made under the call's context, retried within it (MaxAttempts), and
// nothing is retried or sent in the background. When the context ends,
// Publish returns at once and sends nothing more for its messages, so the
// relay can give them back to another replica without this one publishing
// them later. A request already written to a broker when the context ended
// may still be appended: its outcome is unknown, as after any timeout.
//
// # Errors
//
// Publish returns nil, a publishers.Errors with one entry per message, or
// one error for the whole call. Failures are classified for the relay:
//
//   - permanent (publishers.Permanent): message too large (client-side, over
//     MaxMessageBytes, or refused by the broker), unknown or invalid topic,
//     invalid or corrupt record, invalid timestamp. (A topic authorization
//     failure is retried: a missing ACL is an operator's fix away.) When the broker rejects a batch for the content of one
//     record, Publish re-sends the batch's messages in smaller groups so
//     that only the culprit fails. An unknown topic is confirmed with a
//     fresh metadata request first, as kafka-go's cached metadata can
//     trail a newly created topic by seconds.
//   - unavailable (publishers.ErrUnavailable): no broker reachable,
//     connection refused or broken, I/O timeout, TLS failure, SASL
//     authentication failure, broker not available, the publish context's
//     deadline.
//   - transient (anything else): retriable broker errors such as
//     NotEnoughReplicas, LeaderNotAvailable, NotLeaderForPartition or
//     RequestTimedOut, after MaxAttempts tries of the request.
//
// # Security
//
// Config.TLS enables TLS (LoadTLS reads PEM files) and Config.SASL enables
// SASL PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Config redacts the SASL
// password when printed or logged, and no error returned by this package
// contains it.
package kafka

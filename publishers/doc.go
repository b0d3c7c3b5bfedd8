// Package publishers holds what every sink shares with the relay: the sink
// contract, how a sink reports per-message results and how it classifies
// failures. Each sink lives in its own subpackage (publishers/kafka,
// publishers/stdout, ...) and implements Publisher, and optionally Prober
// and KeyBatcher, all declared here; this is the one place their contract
// is written.
//
// # Publish
//
// Publish(ctx, msgs) is synchronous: it sends msgs and returns once each
// was acknowledged by the broker, or failed. Acknowledged means stored as
// durably as the broker stores anything (Kafka: acks=all): a consumer
// reading the moment Publish returns finds the message, and nothing the
// publisher does later is needed for that. Each message arrives as one
// record with its Topic, its Key (a nil key stays without one), its
// Payload byte for byte, its Headers, and the event id (the
// outbox.HeaderEventID header, or the sink's equivalent), which consumers
// use to drop the duplicates at-least-once delivery allows. A sink that
// offers per-key order delivers the messages of one key within one call in
// their order in msgs. A sink that also never sends a key's later message
// of a call after an earlier one failed (other than permanently)
// implements KeyBatcher, and ordered delivery gives it a key's whole
// claimed run in one call; others get one event per key per call. Publish
// is called from several goroutines at once (the relay's workers) and does
// not keep msgs after it returns.
//
// # Results
//
// Publish returns nil when every message was acknowledged, an Errors value
// (one entry per message, nil for the acknowledged ones, at least one not
// nil) when the outcome differs between messages, or any other error for a
// failure of the whole batch. Failures are classified by wrapping:
//
//   - Permanent(err): retrying cannot help (message too large, unknown topic,
//     rejected by the sink); the relay marks the row failed at once. Only
//     what is the message's own fault is permanent.
//   - Unavailable(err): the sink as a whole cannot be reached (or the
//     publisher is closed); the relay releases the rows without spending an
//     attempt and backs off, probing the sink until it answers.
//   - anything else is transient: the row is retried with backoff until it
//     runs out of attempts. RetryAfter(err, d) is transient too, for a
//     destination that said when to try again (HTTP Retry-After): the next
//     attempt waits at least d, within the relay's BackoffMax.
//
// # Context and Close
//
// Publish honours ctx: when ctx has ended, or ends while a broker does not
// answer, Publish returns promptly with an error for every message not yet
// acknowledged (not a permanent one), and sends nothing more for them
// afterwards: no request is retried or started in the background, so the
// relay can give the rows to another replica. A request already written to
// the broker when ctx ended may still be appended; its outcome is unknown.
//
// Close releases the publisher's resources and returns within a bound: it
// does not wait for Publish calls in flight, which end with their context.
// A Publish after Close fails without blaming the messages.
//
// # Prober
//
// A sink that can tell cheaply whether it answers, without publishing (a
// metadata request, a ping), implements Prober: Probe(ctx) returns nil
// when the sink answers and an Unavailable error otherwise, and honours
// ctx. While the sink is down the relay probes it instead of publishing
// rows.
//
// # Conformance
//
// Every sink runs publishers/publisherstest against its real broker: one
// call to publisherstest.Run, with a harness that builds publishers, reads
// back what arrived, and cuts or stalls the broker through a TCP fault
// proxy. The sink declares in publisherstest.Features what it promises;
// every check of what it promises runs. docs/sinks.md describes how to add
// a sink.
package publishers

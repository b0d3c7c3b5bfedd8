// Package publishers holds what every sink shares with the relay: how a sink
// reports per-message results and how it classifies failures. Each sink lives
// in its own subpackage (publishers/kafka, publishers/stdout, ...).
//
// A sink's Publish returns nil when every message was acknowledged, an Errors
// value (one entry per message, nil for the acknowledged ones) for partial
// failure, or any other error for a failure of the whole batch. Failures are
// classified by wrapping:
//
//   - Permanent(err): retrying cannot help (message too large, unknown topic,
//     rejected by the sink); the relay marks the row failed at once.
//   - Unavailable(err): the sink as a whole cannot be reached; the relay
//     releases the rows without spending an attempt and backs off.
//   - anything else is transient: the row is retried with backoff until it
//     runs out of attempts.
package publishers

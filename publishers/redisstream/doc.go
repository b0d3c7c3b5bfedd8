// Package redisstream is the Redis Streams sink of the relay: a Publisher
// that appends outbox messages to Redis streams with
// github.com/redis/go-redis/v9, one XADD per message.
//
// # Streams and entries
//
// A message goes to the stream whose key is Config.StreamPrefix followed
// by its Topic ("events:" + "orders" = "events:orders"; with the default
// empty prefix the key is the topic). A topic for which that key is empty,
// longer than MaxStreamKeyLen bytes, not valid UTF-8, or holds a control
// character or white space fails permanently (ErrInvalidStream). Streams
// are created by their first XADD; nothing else is created or configured.
//
// Each message becomes one entry, with an id Redis assigns ("*": the
// server's clock in milliseconds and a sequence number), and these fields,
// in this order:
//
//   - event_id: the event id in canonical UUID form;
//   - key: the outbox key, byte for byte, only when the message has one (a
//     nil Key gives no key field; an empty, non-nil key an empty value);
//   - payload: the payload, byte for byte;
//   - headers: the headers as a JSON object of strings, names sorted, "{}"
//     when there are none (the reserved outbox.HeaderEventID is never
//     among them: event_id carries the id);
//   - created_at: when the event was written to the outbox, RFC 3339 in UTC
//     with nanoseconds, only when the relay knows it.
//
// With Config.MaxLen, each XADD also trims its stream to about that many
// entries (MAXLEN ~), oldest first, read or not.
//
// # Delivery and acknowledgement
//
// Publish is synchronous. Its XADDs go as one pipeline, in the order of
// the messages, on one pooled connection: one round trip for the whole
// call, not one per message. A message is acknowledged when Redis replied
// to its XADD with the entry's id; with Config.WaitReplicas, the pipeline
// ends with WAIT on the same connection, and the call's messages are
// acknowledged only when WAIT counted that many replicas within
// Config.WaitTimeout. Fewer is a transient error (ErrNotReplicated) for
// every message of the call: the entries were appended on the master, and
// the relay will append them again.
//
// Redis acknowledges from memory. An acknowledged entry is readable at
// once by any client, but whether it survives a crash of the server
// depends on the server's configuration, not on the sink: without
// appendonly (AOF) an entry is lost if Redis stops before its next RDB
// snapshot; with appendonly yes and appendfsync everysec (the default),
// up to about a second of acknowledged entries can be lost; appendfsync
// always loses none but makes every write wait for the disk. WAIT only
// says that replicas received the entries: they may lose them alike, and
// a failover to a replica that did not receive them loses them. For the
// relay's at-least-once delivery to hold across a Redis crash, run Redis
// with appendonly yes and appendfsync always, or with replicas and
// WaitReplicas set.
//
// Publish does not retry: go-redis would send a failed pipeline again,
// XADDs that already reached Redis included. The relay retries, with
// backoff, the messages that were not acknowledged.
//
// # Order
//
// Redis runs a connection's commands in the order it receives them, so
// the messages of one call that share a topic, and so those of one key,
// land in their stream in their order in the call. When Redis refuses one
// XADD in the middle of a pipeline for a reason of the whole server (OOM,
// say) and takes later ones, the later entries of that stream precede the
// refused one once the relay retries it; this only happens when the
// server's state changes during the pipeline.
//
// # Duplicates
//
// Redis does not deduplicate entries: a message the relay publishes twice
// (after a timeout, a failed WAIT, a crash between publish and record)
// becomes two entries with the same event_id. Consumers drop duplicates
// by event_id, or by an idempotency key of their own; nothing on the
// server side does it.
//
// # Errors
//
// Publish returns nil, a publishers.Errors with one entry per message, or
// one error for the whole call. Failures are classified for the relay:
//
//   - permanent (publishers.Permanent): WRONGTYPE (the key holds something
//     other than a stream), a topic that makes no valid stream key
//     (ErrInvalidStream), an entry larger than Config.MaxMessageBytes
//     (ErrTooLarge). Each fails only its own message.
//   - unavailable (publishers.ErrUnavailable): Redis cannot be reached
//     (connection refused, reset or closed, I/O timeouts, TLS failures, no
//     free connection in the pool, the publish context's deadline), or
//     refuses every write of the server for now: OOM (maxmemory reached),
//     LOADING (loading its dataset), BUSY (a script runs), READONLY (a
//     replica, as after a failover), MASTERDOWN, NOREPLICAS
//     (min-replicas-to-write), MISCONF (snapshots failing), NOAUTH and
//     WRONGPASS, too many clients. None of these is a message's fault; the
//     relay backs off without spending attempts. Probe (PING) fails during
//     LOADING and BUSY, and answers during OOM, READONLY, MISCONF and
//     NOREPLICAS: the relay then tries a batch now and then.
//   - transient (anything else): ErrNotReplicated, NOPERM (an ACL refusing
//     the key: an operator's fix away), MOVED and ASK (a Redis Cluster
//     node: the sink speaks to one standalone server, or to a proxy), any
//     other error reply, the caller's cancellation.
//
// # Context and Close
//
// Every call honours its context. go-redis bounds reads and writes by the
// context's deadline, and by Config.Timeout; a cancellation makes Publish
// and Probe return at once, with the pipeline's outcome unknown, while the
// connection carrying it goes back to the pool when its replies come, or
// is closed when Config.Timeout passes without them, or at Close. Close
// closes every connection and returns at once.
//
// # Security
//
// A rediss:// URL, or Config.TLS (LoadTLS reads PEM files), makes
// connections use TLS, with a client certificate when one is given.
// Authentication uses the user and password of the URL, or
// Config.Password. Config redacts both passwords when printed or logged,
// and no error returned by this package contains them.
package redisstream

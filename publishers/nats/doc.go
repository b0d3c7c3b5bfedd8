// Package natssink is the NATS JetStream sink of the relay: a Publisher
// that publishes outbox messages to JetStream streams with
// github.com/nats-io/nats.go and its jetstream package.
//
// # Messages
//
// Each outbox message becomes one NATS message on the subject named by its
// Topic; the stream whose subjects capture that subject stores it. The
// payload is the message data, byte for byte, and the headers are:
//
//   - the message's own headers, name and value unchanged;
//   - "outbox-event-id" (outbox.HeaderEventID), the event id in canonical
//     UUID form, which consumers use to drop duplicates;
//   - "Nats-Msg-Id", the same event id, which makes the stream drop a
//     message it already stored within its duplicate window;
//   - the key: "outbox-key" (HeaderKey) holds it as it is when it is valid
//     UTF-8 without control characters and without white space at its
//     ends; any other key is in "outbox-key-base64" (HeaderKeyBase64),
//     standard base64. A nil key sets neither; an empty key is
//     "outbox-key" with an empty value. Key decodes either.
//
// # Subjects
//
// The topic is the subject, as it is: a route's destination template
// (events.{topic}) builds it. It must be 1 to MaxSubjectLen bytes of
// UTF-8, tokens separated by '.', none empty, without white space, control
// characters or the wildcards '*' and '>', and must not start with '$'
// (the server's JetStream API and system subjects). Any other topic fails
// its message permanently (ErrInvalidSubject), as does a header NATS
// cannot carry intact (a value with a line break or white space at its
// ends, a name with characters such as ':' or '/') or whose name is
// reserved ("Nats-..." names, which the server acts on, and the key
// headers) (ErrInvalidHeader), and a message whose payload and headers
// exceed the server's max_payload (ErrMessageTooLarge), checked before
// sending.
//
// # Delivery
//
// Publish is synchronous: it publishes every message asynchronously on one
// connection, up to Config.MaxInFlight unacknowledged at a time across the
// Publisher, then waits for each PubAck. Acknowledged means the stream
// stored the message (for a replicated stream, a quorum of its replicas
// did); a PubAck marked duplicate counts as acknowledged, as the stream
// already holds the message. A message that got no PubAck within
// Config.PublishTimeout fails as unavailable.
//
// The messages are sent in their order in the call, on one connection, and
// the server stores one connection's messages for a stream in the order it
// received them: one key's messages of one call (which share a subject)
// are stored in order when they all succeed. When one of them fails and a
// later one succeeds, the failed one is stored after it when retried; the
// relay's ordered delivery (--ordered-topics) never puts two events of a
// key in one call, so its per-key order holds.
//
// Nothing is retried by the sink or in the background: not a message that
// met no responders (the client's own retry is turned off), not a lost
// connection (the client does not reconnect; the next Publish or Probe
// dials afresh). When the context ends, Publish returns at once; a message
// already written to the connection may still be stored.
//
// # Duplicates
//
// The stream drops a message whose Nats-Msg-Id it stored within its
// duplicate window (2 minutes by default, the stream's duplicate_window),
// and acknowledges it as a duplicate. A message the relay publishes again
// after an unknown outcome (a lost PubAck, a timeout, a relay that lost
// its lease, 30 s by default, or crashed) is therefore dropped when the new
// attempt comes within the window of the first; the relay's retries wait
// BackoffMin (1 s) doubling to BackoffMax (5 min), so late retries and
// re-drives by hand can fall outside it. A copy beyond the window is
// stored again: consumers drop it by the outbox-event-id header, as with
// every sink. Make the window longer than the lease plus the publish
// timeout plus the backoff you expect retries of unknown outcomes to take.
//
// # Errors
//
// Publish returns nil, a publishers.Errors with one entry per message, or
// one error for the whole call. Failures are classified for the relay:
//
//   - permanent (publishers.Permanent): an invalid subject or header, a
//     message over max_payload, a subject no stream captures (ErrNoStream;
//     the message says how to create one), a PubAck error for a message
//     over the stream's max_msg_size, headers over 64 KiB, or a sealed
//     stream.
//   - unavailable (publishers.ErrUnavailable): no server reachable, a
//     failed connect (TLS, authentication), a lost connection, no PubAck
//     within the publish timeout or the context's deadline, JetStream not
//     enabled (ErrNoJetStream), a closed publisher.
//   - transient (anything else): other PubAck errors (a full stream with
//     the discard-new policy, insufficient resources), a stream that
//     exists but did not answer (ErrStreamSilent, a leader election).
//
// "No responders" to a publish means that nothing captured the subject:
// either no stream does, or JetStream is down or not enabled. Publish tells
// them apart by asking JetStream which stream captures the subject (once
// per subject and call): no stream is permanent, a stream that exists is
// transient, no answer from JetStream is unavailable.
//
// A subject the credentials may not publish to is dropped by the server
// with an asynchronous permissions error (logged at Warn level); its
// messages then fail as unavailable when their PubAck times out.
//
// # Probe
//
// Probe connects if needed and asks for the account's JetStream
// information: nil when JetStream answers, unavailable otherwise.
//
// # Security
//
// Config takes a credentials file, a user and password or a token, and
// TLS (LoadTLS reads PEM files). Config redacts the password, the token
// and passwords in URLs when printed or logged, and no error returned by
// this package contains them.
package natssink

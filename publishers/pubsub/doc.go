// Package pubsubsink is the Google Cloud Pub/Sub sink of the relay: a
// Publisher that publishes outbox messages to Pub/Sub topics with
// cloud.google.com/go/pubsub/v2.
//
// # Messages
//
// Each outbox message becomes one Pub/Sub message on the topic whose id is
// its Topic, in Config.Project. The payload is the data, byte for byte;
// the attributes are the message's headers, unchanged, the event id
// ("outbox-event-id", outbox.HeaderEventID) and the key: "outbox-key"
// (AttrKey) as it is when it is UTF-8 of at most 1024 bytes, otherwise
// "outbox-key-base64" (AttrKeyBase64). A nil key sets neither; Key decodes
// either. A header the service would refuse (a name starting with "goog",
// over 256 bytes, a value over 1024 bytes, not UTF-8, more than 100
// attributes) or a key over 1024 bytes as an attribute fails its message
// permanently (ErrInvalidMessage), as does a message over
// Config.MaxMessageBytes (ErrTooLarge), before sending.
//
// # Delivery and order
//
// Acknowledged means the service answered the publish request with the
// message's id: it stored the message for the topic's subscriptions.
// The key's attribute value is the message's ordering key, and the client
// publishes with message ordering on: one key's messages of one topic go
// out in their order, one request at a time, and the service keeps that
// order for subscriptions with ordering enabled. An empty key has no
// ordering key (the service treats "" as none), so its messages are not
// ordered. After a failed request the client pauses the key and fails its
// later messages unsent (pubsub.ErrPublishingPaused), the promise of
// publishers.KeyBatcher; Publish resumes the key once its messages of the
// call have settled, so the relay's retry goes out next.
//
// Nothing is retried by the sink or the client (its retries are turned
// off). When the context ends, Publish returns at once; a message handed
// to the client already may still be sent within a millisecond, and a
// request in flight may still be stored.
//
// # Duplicates
//
// Pub/Sub has no publish-side deduplication by id: a message published
// again after an unknown outcome is stored again, with a new message id.
// Consumers drop duplicates by the outbox-event-id attribute (the inbox).
//
// # Errors
//
// NotFound (no such topic: ErrNoTopic), InvalidArgument and oversized
// messages are permanent; Unavailable, Unauthenticated, PermissionDenied
// and a closed publisher (ErrClosed) make the sink unavailable; a
// deadline, ResourceExhausted (quota) and a paused key are transient.
// After an unreachable service the client is dropped and the next call
// makes a new one, so that a recovered service answers the next call.
//
// # Connecting
//
// Config.Endpoint, or the PUBSUB_EMULATOR_HOST variable, points at an
// emulator or fake: plain gRPC, no credentials. Without either the client
// reaches Google with Application Default Credentials, which the sink
// never reads or logs.
package pubsubsink

// Package mqttsink publishes outbox messages to an MQTT 5 broker with
// paho.golang, at QoS 1 (PUBACK) or 2 (PUBCOMP): a message is acknowledged
// once the broker answered with a reason code below 0x80 (0x10, "no
// matching subscribers", included).
//
// Topic: the message's topic (or a route's destination), a topic name
// without the wildcards + and #, at most 65,535 bytes of UTF-8; others
// fail permanently. The payload is sent byte for byte. Headers travel as
// user properties, with the event id (outbox.HeaderEventID) and the key
// (AttrKey, or AttrKeyBase64 when it is not UTF-8; Key decodes both); an
// event's content-type header is also the Content Type property.
//
// Order: one connection per Publisher; a key's messages of a call are
// published one after the other, each once the previous was acknowledged,
// and keys in parallel (up to Config.MaxInFlight). A failure other than a
// permanent one stops its key for the rest of the call, so the Publisher
// is a publishers.KeyBatcher. MQTT brokers keep one publisher's order per
// topic towards each subscriber.
//
// Duplicates: MQTT does not drop a message published again after an
// unknown outcome; consumers drop copies by the event id.
//
// Errors: reason codes 0x87 (not authorized), 0x90 (topic name invalid),
// 0x95 (packet too large), 0x99 (payload format invalid) and an invalid
// message are permanent; no connection, a lost one, or no answer within
// Config.PublishTimeout are unavailable; other reason codes (0x89 server
// busy, 0x97 quota exceeded, ...) are transient.
package mqttsink

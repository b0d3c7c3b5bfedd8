// Package kinesissink publishes outbox messages to Amazon Kinesis Data
// Streams with aws-sdk-go-v2's PutRecords.
//
// Stream: the message's topic (or a route's destination). Record: the
// partition key is the event's key when it is 1 to 256 characters of
// UTF-8, "sha256:" and the hex SHA-256 of any other key, and the event id
// for an event without key. A Kinesis record has no headers, so its data
// is the event as a CloudEvent in the JSON event format
// (publishers/cloudevents, structured mode), with two extensions: outboxkey
// (the key's bytes in base64) and outboxheaders (the event's headers as a
// JSON object, when it has any). An event that relay run already turned
// into a structured CloudEvent travels as it is.
//
// Acknowledgement and order: an event is acknowledged when the PutRecords
// response gives its record a sequence number. AWS documents that
// PutRecords does not keep the order of the records of one request, so a
// call goes in rounds: each round's request holds at most one event per
// key, and a key's next event waits for the previous one's success. A
// failure other than a permanent one stops its key for the rest of the
// call (a publishers.KeyBatcher).
//
// Errors: a missing stream (ResourceNotFoundException), an invalid
// request or a record over 1 MiB are permanent; no answer (refused,
// reset, timed out) is unavailable; a record refused for throughput
// (ProvisionedThroughputExceededException) or an internal failure is
// transient. Kinesis keeps a record published again after an unknown
// outcome: consumers drop copies by the CloudEvent id.
package kinesissink

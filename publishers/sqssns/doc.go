// Package sqssns is the Amazon SQS sink (Amazon SNS is to follow, when an
// emulator of it can test it): NewSQS sends each topic's messages to an
// SQS queue with SendMessageBatch, at most 10 messages and MaxMessageBytes
// a request, with github.com/aws/aws-sdk-go-v2. Credentials and region come
// from the SDK's standard chain; they are never logged.
//
// Destination: SQS takes a queue URL, or a queue name (Name maps the
// outbox topic: characters other than letters, digits, '-' and '_' become
// '-', a final ".fifo" stays) whose URL GetQueueUrl finds once.
//
// Message: the payload is the body; a payload that is not UTF-8 text of
// the characters SQS allows is sent in base64 with the attribute
// outbox-body-encoding=base64. The headers
// are String message attributes, with the event id as outbox-event-id and
// the key, byte for byte, as the Binary attribute outbox-key. SQS and SNS
// take at most 10 attributes: an event with more than 8 headers (9
// without key) fails permanently, naming the limit.
//
// FIFO (a name ending in .fifo): MessageDeduplicationId is the event id,
// so the service drops a resend within its 5-minute window;
// MessageGroupId is the key (printable ASCII up to 128 characters, else
// "sha256:" and the key's hash), or the event id for an event without key.
// A group's messages are stored in the order sent; standard queues keep
// no order. The Publisher is not a publishers.KeyBatcher: the
// relay sends one event per key per call.
//
// Acknowledgement: a message is acknowledged when SendMessageBatch lists
// it as successful (stored redundantly by AWS).
// Errors: an entry the response lists as failed with SenderFault, a
// missing queue (ErrNoDestination), a message too large, with
// too many attributes or invalid, fail permanently (publishers.Permanent);
// no answer (refused, reset, timed out) is publishers.Unavailable, and the
// rest of the call is then not sent; throttling, 5xx and other failures
// are transient. The SDK does not retry: the relay does.
package sqssns

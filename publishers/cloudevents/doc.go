// Package cloudevents sends the relay's events as CloudEvents 1.0
// (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/spec.md):
// Convert turns one outbox.Message into the message a sink sends, Wrap
// does it for every message a sink publishes.
//
// Each event becomes a CloudEvent with these attributes:
//
//	specversion      1.0
//	id               the event id (the outbox-event-id header's value)
//	source           Config.Source (relay run: --cloudevents-source, default /outboxrelay)
//	type             the event's topic
//	subject          the key, when it is text: valid UTF-8, no control
//	                 characters, no white space at its ends
//	time             the event's created_at, RFC 3339
//	datacontenttype  the event's content-type header, when it has one
//	extensions       each event header whose name is a valid attribute
//	                 name (a-z and 0-9, at most 20 characters) but for
//	                 the spec's own (type, source, ...)
//
// An event header named ce-NAME sets the attribute NAME instead (ce-type,
// ce-source, ce-subject, ce-time, ce-dataschema, or an extension); it is
// not sent as a header of its own. ce-id, ce-specversion and
// ce-datacontenttype are refused: the relay sets those.
//
// In ModeBinary the payload is sent as it is and the attributes travel as
// headers named by the sink's Binding (Kafka: ce_id, HTTP: ce-id, ...),
// datacontenttype as the content-type header; on HTTP, the values are
// percent-encoded as its binding says (3.1.3.2), which the Go and Java SDKs
// do not decode (sdk-go issue 1331): plain ASCII values are unchanged.
// In ModeStructured the
// payload becomes the JSON event format's envelope, with the content-type
// header application/cloudevents+json: the payload is its "data" when the
// content type is JSON (or absent) and the payload is valid JSON, its
// "data_base64" otherwise. In both modes the event's headers stay plain
// headers too, and the sinks add their own (outbox-event-id, ...) as
// always, so that readers of the relay's messages keep working.
package cloudevents

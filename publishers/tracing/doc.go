// Package tracing wraps a sink (a publishers.Publisher) so that every message
// it publishes gets an OpenTelemetry PRODUCER span, and the consumer
// continues the trace of the request that wrote the message.
//
// outbox.Write stores the W3C trace context of its ctx in the row's headers
// (traceparent, tracestate). For each message of a Publish, the wrapper
// starts a span named "send {destination}" whose parent is that stored
// context (a message without one starts a new root trace), with the
// attributes of the OpenTelemetry messaging semantic conventions
// (messaging.system, messaging.operation.name and .type "send",
// messaging.destination.name, messaging.message.id,
// messaging.message.body.size, and for Kafka messaging.kafka.message.key)
// and outbox.attempt. It hands the sink a copy of each message whose
// headers carry the new span's traceparent and tracestate instead of the
// stored ones, so a consumer that extracts traceparent from the received
// message is the child of the relay's span, in the writer's trace. Each
// span ends when the sink's Publish returns, with an error status when
// that message failed (per message, from publishers.Errors) and error.type
// naming the failure's class (permanent, unavailable or transient).
//
// A span the sampler drops is not recording: the wrapper then leaves the
// message as stored, so that the consumer is the child of the writer's
// span (the relay's hop is missing from the trace, rather than the
// consumer's parent), and a message without a stored context is published
// without one. Such a message costs an extraction and an unrecorded span,
// none of the copying and attributes of a sampled one.
//
// The wrapper knows nothing of the sink: the destination is the message's
// topic as the sink receives it (after routing by publishers/route, the
// rule's destination), and the sink's name is messaging.system. Partition
// and offset are not set: the publishers.Publisher contract returns only an
// error per message.
//
// The messages the relay passes in are never modified (it keeps them for
// retries): the headers of a sampled message are copied.
package tracing

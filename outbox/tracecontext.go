package outbox

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C Trace Context headers (https://www.w3.org/TR/trace-context/) that
// Write stores with a row when its ctx holds a span, so that the relay can
// continue the writer's trace.
const (
	// HeaderTraceparent carries the trace id, the parent span id and the
	// sampling flag.
	HeaderTraceparent = "traceparent"
	// HeaderTracestate carries vendor-specific trace data; stored only when
	// not empty.
	HeaderTracestate = "tracestate"
)

// traceContext is the W3C trace context of a Write's ctx, encoded once per
// call and added to each message's headers.
type traceContext struct {
	parent, state string
}

// Get, Set and Keys make *traceContext a propagation.TextMapCarrier that
// receives what the W3C propagator injects.
func (c *traceContext) Get(string) string { return "" }
func (c *traceContext) Set(key, value string) {
	switch key {
	case HeaderTraceparent:
		c.parent = value
	case HeaderTracestate:
		c.state = value
	}
}
func (c *traceContext) Keys() []string { return nil }

// traceContextOf returns the W3C trace context of the span (or remote span
// context) in ctx, or nil when ctx has no valid one. The W3C propagator is
// used directly, whatever global propagator the application configured (if
// any), because the relay reads exactly these headers.
func traceContextOf(ctx context.Context) *traceContext {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	tc := &traceContext{}
	propagation.TraceContext{}.Inject(ctx, tc)
	if tc.parent == "" {
		return nil
	}
	return tc
}

// headersWith returns h with the trace context added, in a new map: the
// caller's map is never written to. A message that already carries a
// traceparent keeps its own (and its own tracestate, or none): the caller
// chose the parent explicitly.
func (c *traceContext) headersWith(h map[string]string) map[string]string {
	if c == nil {
		return h
	}
	if _, own := h[HeaderTraceparent]; own {
		return h
	}
	out := make(map[string]string, len(h)+2)
	for k, v := range h {
		if k != HeaderTracestate { // belongs to the caller's own traceparent, which it did not set
			out[k] = v
		}
	}
	out[HeaderTraceparent] = c.parent
	if c.state != "" {
		out[HeaderTracestate] = c.state
	}
	return out
}

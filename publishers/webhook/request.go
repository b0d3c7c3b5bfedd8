package webhook

import (
	"encoding/base64"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Headers of every request. The webhook-* ones are the Standard Webhooks
// headers, written as the specification spells them; HTTP header names
// are case-insensitive (and HTTP/2 sends them in lower case), so a
// receiver looks them up in any case.
const (
	// HeaderWebhookID carries the event id, the same on every attempt.
	HeaderWebhookID = "webhook-id"
	// HeaderWebhookTimestamp carries the attempt's time in Unix seconds.
	HeaderWebhookTimestamp = "webhook-timestamp"
	// HeaderWebhookSignature carries one "v1,<base64>" per Config.Secrets.
	HeaderWebhookSignature = "webhook-signature"
	// HeaderEventID carries the event id too, under the name every sink
	// uses (outbox.HeaderEventID).
	HeaderEventID = outbox.HeaderEventID
	// HeaderTopic carries the message's topic.
	HeaderTopic = "Outbox-Topic"
	// HeaderKey carries the message's key when it is printable ASCII
	// without leading or trailing space; absent when the message has no key.
	HeaderKey = "Outbox-Key"
	// HeaderKeyBase64 carries the key in standard base64 instead, when it
	// is not such text.
	HeaderKeyBase64 = "Outbox-Key-Base64"
	// HeaderPrefix starts the name under which each of the message's
	// headers is sent: "trace-id" becomes "Outbox-Header-trace-id". A
	// header named content-type also sets the request's Content-Type (in
	// place of Config.ContentType); traceparent, tracestate and the
	// CloudEvents attributes (ce-*) are also sent under their own names.
	HeaderPrefix = "Outbox-Header-"
	// headerIdempotencyKey carries the event id as well, as the
	// structured-field string (in double quotes) that the draft IETF
	// Idempotency-Key header defines; its presence also lets Go's
	// transport resend a request over a fresh connection when a pooled one
	// turns out closed before the request went out.
	headerIdempotencyKey = "Idempotency-Key"
	// headerTraceparent and headerTracestate are the W3C Trace Context
	// headers, as the writer stores them in a message's headers
	// (outbox.Write, from the span of its ctx): sent under their own
	// names as well as prefixed.
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
)

// request is one message made ready to send, but for the per-attempt
// headers (timestamp and signature).
type request struct {
	url, shown string // shown: url with its password redacted
	header     http.Header
}

// prepare turns m into a request, or fails with ErrInvalidMessage when m
// cannot travel as an HTTP request intact.
func (p *Publisher) prepare(m *outbox.Message) (request, error) {
	if err := outbox.ValidateTopic(m.Topic); err != nil {
		return request{}, fmt.Errorf("webhook: event %s: %w: %w", m.ID, ErrInvalidMessage, err)
	}
	target, shown := p.url.expand(m.Topic)
	h := make(http.Header, len(p.static)+len(m.Headers)+8)
	maps.Copy(h, p.static) // shared slices: nobody writes to them
	id := m.ID.String()
	h[HeaderWebhookID] = []string{id}
	h[HeaderEventID] = []string{id}
	h[headerIdempotencyKey] = []string{`"` + id + `"`}
	h["Content-Type"] = p.contentType
	h[HeaderTopic] = []string{m.Topic}
	switch {
	case m.Key == nil:
	case printable(m.Key):
		h[HeaderKey] = []string{string(m.Key)}
	default:
		h[HeaderKeyBase64] = []string{base64.StdEncoding.EncodeToString(m.Key)}
	}
	seen := make(map[string]string, len(m.Headers))
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		value := m.Headers[name]
		switch {
		case !validToken(name):
			return request{}, fmt.Errorf("webhook: event %s: %w: header name %q is not an HTTP token", m.ID, ErrInvalidMessage, name)
		case !intactValue(value):
			return request{}, fmt.Errorf("webhook: event %s: %w: the value of header %q holds a control character or starts or ends with a space, which HTTP does not carry intact", m.ID, ErrInvalidMessage, name)
		}
		canonical := http.CanonicalHeaderKey(name)
		if other, dup := seen[canonical]; dup {
			return request{}, fmt.Errorf("webhook: event %s: %w: headers %q and %q differ only in case, which HTTP does not tell apart", m.ID, ErrInvalidMessage, other, name)
		}
		seen[canonical] = name
		h[HeaderPrefix+name] = []string{value}
		switch lower := strings.ToLower(name); {
		case lower == "content-type":
			// The event's own content type is the request's.
			h["Content-Type"] = []string{value}
		case name == headerTraceparent || name == headerTracestate, strings.HasPrefix(lower, "ce-"):
			// Also under its own name, where HTTP tracing middleware
			// looks for it (the W3C Trace Context header names), and
			// where CloudEvents readers look for the attributes (the
			// HTTP binding's ce- headers, publishers/cloudevents).
			h[canonical] = []string{value}
		}
	}
	return request{url: target, shown: shown, header: h}, nil
}

// printable reports whether key can be a header value as it is: printable
// ASCII without a leading or trailing space (which receivers trim).
func printable(key []byte) bool {
	for _, c := range key {
		if c < ' ' || c > '~' {
			return false
		}
	}
	return len(key) == 0 || key[0] != ' ' && key[len(key)-1] != ' '
}

// validToken reports whether name is an HTTP token (RFC 9110, 5.6.2), as
// a header name must be.
func validToken(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue reports whether v can be a header value: no control
// character but tab. Bytes of UTF-8 beyond ASCII are sent as they are.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// intactValue reports whether v arrives as it is: a valid value that
// neither starts nor ends with a space or tab, which receivers trim.
func intactValue(v string) bool {
	if !validValue(v) {
		return false
	}
	return v == "" || !isBlank(v[0]) && !isBlank(v[len(v)-1])
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

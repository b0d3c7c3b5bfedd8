package webhook

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/outbox"
	sink "github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// errMalformed is wrapped by the error of a verified request that is not
// a message as the sink sends one.
var errMalformed = errors.New("webhook: malformed message")

// message returns the inbox message of a request that the relay's webhook
// sink sent, whose body is body: the event id from webhook-id (and
// outbox-event-id, which must agree when present), the topic from
// Outbox-Topic, the key from Outbox-Key or Outbox-Key-Base64 (nil when
// neither is present), the headers from Outbox-Header-<name> with names
// in lower case (traceparent and tracestate from their own headers when
// not sent prefixed), and body as the payload. CreatedAt is zero: the sink
// does not send it. Its errors wrap errMalformed, and inbox.ErrNoEventID
// when the request has no valid event id.
func message(r *http.Request, body []byte) (inbox.Message, error) {
	h := r.Header
	id, err := inbox.ParseID(h.Get(sink.HeaderWebhookID))
	if err != nil {
		return inbox.Message{}, fmt.Errorf("%w: %s: %w", errMalformed, sink.HeaderWebhookID, err)
	}
	if other := h.Get(sink.HeaderEventID); other != "" && other != id.String() {
		return inbox.Message{}, fmt.Errorf("%w: %s %q differs from %s %s", errMalformed, sink.HeaderEventID, truncate(other, 64), sink.HeaderWebhookID, id)
	}
	m := inbox.Message{ID: id, Topic: h.Get(sink.HeaderTopic), Headers: map[string]string{}, Payload: body}
	if v := h.Values(sink.HeaderKeyBase64); len(v) > 0 {
		if m.Key, err = base64.StdEncoding.DecodeString(v[0]); err != nil {
			return inbox.Message{}, fmt.Errorf("%w: %s is not standard base64", errMalformed, sink.HeaderKeyBase64)
		}
		if m.Key == nil {
			m.Key = []byte{}
		}
	} else if v := h.Values(sink.HeaderKey); len(v) > 0 {
		m.Key = []byte(v[0]) // "" is an empty key, not none
	}
	prefix := http.CanonicalHeaderKey(sink.HeaderPrefix)
	for name, values := range h {
		if rest, ok := strings.CutPrefix(http.CanonicalHeaderKey(name), prefix); ok && rest != "" && len(values) > 0 {
			// HTTP names are case-insensitive and arrive canonicalised
			// (HTTP/2: in lower case): the event's own spelling is lost.
			m.Headers[strings.ToLower(rest)] = values[0]
		}
	}
	for _, name := range []string{outbox.HeaderTraceparent, outbox.HeaderTracestate} {
		if _, ok := m.Headers[name]; !ok && h.Get(name) != "" {
			m.Headers[name] = h.Get(name)
		}
	}
	return m, nil
}

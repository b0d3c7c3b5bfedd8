// Package webhook is the HTTP webhook sink of the relay: a Publisher that
// POSTs each outbox message to an HTTP endpoint, signed as the Standard
// Webhooks specification (https://www.standardwebhooks.com/) says. It uses
// net/http only.
//
// # Requests
//
// Each message is one POST to Config.URL with "{topic}" replaced by the
// message's topic (path-escaped in the path, query-escaped in the query):
// "https://hooks.example.com/events/{topic}" sends topic orders.created to
// https://hooks.example.com/events/orders.created. The placeholder may
// appear only in the path and query, so every message goes to the one host
// the URL names; a topic that is not a valid outbox topic fails
// permanently. A topic is never taken as a URL of its own: whoever writes
// events cannot send the relay's requests elsewhere.
//
// The body is the payload, byte for byte, with Config.ContentType
// (application/json by default). The headers are:
//
//   - webhook-id: the event id (canonical UUID), the same on every attempt,
//     which receivers use to drop duplicates; outbox-event-id carries it
//     too, and Idempotency-Key in double quotes (a structured-field
//     string, as the IETF draft defines that header);
//   - webhook-timestamp: the attempt's time, in Unix seconds;
//   - webhook-signature: with Config.Secrets, one "v1,<base64>" per secret,
//     space-separated, each the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>"
//     under that secret's key (for rotation: sign with the old and the new
//     secret until the receiver has switched);
//   - Outbox-Topic: the topic;
//   - Outbox-Key: the key, when it is printable ASCII without leading or
//     trailing space, or else Outbox-Key-Base64: the key in standard
//     base64; neither when the message has no key;
//   - Outbox-Header-<name>: each of the message's headers, so that none
//     can clash with the headers above or with those that frame the
//     request; a name that is not an HTTP token, a value with a control
//     character or with leading or trailing space (which HTTP trims), or
//     two names that differ only in case fail the message permanently;
//   - traceparent and tracestate: the W3C trace context, when the
//     message's headers hold it (outbox.Write stores the writer's span),
//     also under its own name, so that HTTP tracing middleware continues
//     the trace;
//   - Config.Headers, the same on every request (credentials, say).
//
// HTTP header names are case-insensitive: a receiver looks them up in any
// case (HTTP/2 sends them in lower case).
//
// # Delivery
//
// Publish is synchronous: a message is acknowledged when the receiver
// answered 2xx. One key's messages are sent one after the other, in order,
// each once the previous one was answered; keys, and messages without a
// key, go in parallel, up to Config.MaxInFlight requests at once per
// publisher. A failure that is not permanent stops its key for the rest
// of the call (the later messages fail alike, unsent), so that one key's
// messages arrive in order within a call. Everything a call sends is sent
// before it returns, under its context: nothing is retried or sent in the
// background. The relay does the retrying.
//
// # Errors
//
//   - permanent (publishers.Permanent): 3xx (redirects are not followed:
//     the URL should be updated), 410 Gone and the other 4xx but those
//     below; a message that cannot travel intact (ErrInvalidMessage).
//   - transient: 5xx, 408, 425 and 429, and 401, 403 and 407 (refused
//     credentials are an operator's fix away); with Retry-After, in
//     seconds or as an HTTP date, wrapped in publishers.RetryAfter so that
//     the relay waits at least that long. No answer within Config.Timeout
//     (ErrTimeout), and the caller's context ending, are transient too.
//   - unavailable (publishers.ErrUnavailable): no HTTP answer at all,
//     connection refused or reset, DNS or TLS failure, dial timeout: the
//     one host cannot be reached. Publish and Probe after Close.
//
// # Probe
//
// Publisher implements publishers.Prober. Probe GETs Config.ProbeURL, wanting
// 2xx, when it is set, and otherwise asks the URL's host "OPTIONS *" (the
// request about the server as a whole, which touches no resource) and
// takes any answer but 502, 503 and 504: an HTTP answer is what an
// unavailable Publish lacked.
//
// # Security
//
// Config redacts Secrets, the values of Headers and a URL's password when
// printed or logged, and no error of this package contains them. The URL
// itself (path and query) does appear in errors and logs: keep tokens in
// Config.Headers rather than in the URL. Proxies from the environment
// (HTTPS_PROXY) are not used.
package webhook

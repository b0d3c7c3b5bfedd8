// Package webhook receives the requests of the relay's webhook sink
// (publishers/webhook) and applies each event once through the inbox.
//
// NewHandler returns an http.Handler that verifies each request's Standard
// Webhooks signature (https://www.standardwebhooks.com/), turns the
// request into an inbox.Message and passes it to a process function,
// which applies it in a transaction that records its event id
// (inbox.Inbox.Handle):
//
//	in, err := inbox.New(inbox.Config{Consumer: "shipping"})
//	...
//	h, err := webhook.NewHandler(webhook.Config{
//		Secrets: strings.Split(os.Getenv("OUTBOX_WEBHOOK_SECRET"), ","),
//	}, func(ctx context.Context, m inbox.Message) (bool, error) {
//		return in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
//			_, err := tx.Exec(ctx, "INSERT INTO shipments (order_id) VALUES ($1)", orderOf(m.Payload))
//			return err
//		})
//	})
//	...
//	http.Handle("POST /events/{topic}", h)
//
// # Verification
//
// A request is verified when it carries webhook-id, webhook-timestamp and
// webhook-signature, its timestamp is within Config.Tolerance (5 minutes)
// of the receiver's clock, past or future, and one of its "v1,<base64>"
// signatures is the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>"
// under one of Config.Secrets, compared in constant time. Listing the old
// and the new secret lets the sink's secret be rotated without a refused
// request. Only the id, the timestamp and the body are signed: the topic,
// key and headers are not, so serve the handler over HTTPS.
//
// # Messages
//
// The message's ID is webhook-id (outbox-event-id must agree), Topic is
// Outbox-Topic, Key is Outbox-Key or the decoded Outbox-Key-Base64 (nil
// when neither is sent, empty when the key was), Headers are the
// Outbox-Header-<name> headers with their names in lower case (HTTP does
// not keep their case), traceparent and tracestate included, and Payload
// is the body. CreatedAt is zero: the sink does not send it.
//
// # Answers
//
// Each answer is one the sink classifies as the outcome asks (405 to a
// method other than POST, which the sink does not send):
//
//   - 204 No Content when process succeeded, and for a duplicate, marked
//     with the header Inbox-Duplicate: true (HeaderDuplicate): the relay
//     marks the event sent;
//   - 401 Unauthorized when the request is not verified: the sink
//     retries 401 like 5xx, so a wrong secret or a skewed clock delays
//     events, with backoff, until an operator fixes it (or until the
//     relay's MaxAttempts fail them; `relay failed retry` sends them again);
//     401 rather than 400, which would fail each event at once;
//   - 400 Bad Request when a verified request is not a message (its
//     webhook-id is not a UUID), and 413 when the body is over
//     Config.MaxBodyBytes: the relay fails the event for good;
//   - 500 Internal Server Error when process fails: the relay retries;
//   - 422 Unprocessable Entity when process's error wraps ErrPermanent
//     (see Permanent): the relay fails the event for good.
//
// The body of a refusal is the error's text, which the relay records as
// the event's last error; no error of this package contains a secret.
// process runs with the request's context, which ends when the sink gives
// up on the request (after its Timeout, 15 seconds by default): the
// transaction then rolls back and the retry applies the event.
package webhook

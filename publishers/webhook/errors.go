package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/publishers"
)

var (
	// ErrInvalidConfig is wrapped by the errors New returns for an invalid
	// Config; each message names the field.
	ErrInvalidConfig = errors.New("webhook: invalid config")
	// ErrClosed is returned by Publish and Probe after Close.
	ErrClosed = errors.New("webhook: publisher closed")
	// ErrInvalidMessage is wrapped by the error of a message that cannot
	// travel as an HTTP request intact (an invalid topic, a header name
	// that is not an HTTP token, a header value with a control
	// character); it is permanent.
	ErrInvalidMessage = errors.New("message cannot be sent over HTTP intact")
	// ErrTimeout is wrapped by the error of a request that got no answer
	// within Config.Timeout; it is transient.
	ErrTimeout = errors.New("no answer within the request timeout")
)

// StatusError is a receiver's answer other than 2xx.
type StatusError struct {
	// Code is the HTTP status code, e.g. 503.
	Code int
	// Status is the status line's text, e.g. "503 Service Unavailable".
	Status string
	// URL is the request's URL, its password redacted.
	URL string
	// Location is the Location header of a redirect, which is not
	// followed; "" otherwise.
	Location string
	// RetryAfter is the wait the Retry-After header asked for, in seconds
	// or as an HTTP date; 0 when it is absent, invalid or past.
	RetryAfter time.Duration
	// Body is the start of the response body, as text, for the message.
	Body string
}

// Error implements error.
func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "webhook: POST %s: %s", e.URL, e.Status)
	if e.Location != "" {
		fmt.Fprintf(&b, " to %s (redirects are not followed: point the URL at the new place)", redactURL(e.Location))
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %q", e.Body)
	}
	return b.String()
}

// transientStatus reports whether a receiver's answer says "not now"
// rather than "not this message": 5xx, 408 Request Timeout, 425 Too
// Early, 429 Too Many Requests, and 401, 403 and 407, since credentials
// the receiver refuses are an operator's fix away (as the Kafka sink
// retries a topic authorization failure). Other 3xx and 4xx answers
// refuse the message, or its topic's URL, for good.
func transientStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
		return true
	}
	return code >= 500
}

// classify marks err for the relay; it is the one place where answers and
// transport errors are translated:
//
//   - publishers.Permanent: a message that cannot travel intact
//     (ErrInvalidMessage), or a StatusError for a 3xx or a 4xx other than
//     those transientStatus names (410 Gone among them);
//   - transient, wrapped in publishers.RetryAfter when the receiver sent
//     Retry-After: a StatusError that transientStatus names, a request
//     without an answer within Config.Timeout (ErrTimeout), and the
//     caller's context ending;
//   - publishers.Unavailable: no HTTP answer at all (connection refused
//     or reset, DNS failure, TLS handshake failure, dial timeout): the URL
//     names one host, and it cannot be reached; and ErrClosed.
//
// Errors already marked are returned as they are.
func classify(err error) error {
	var status *StatusError
	switch {
	case err == nil:
		return nil
	case publishers.IsPermanent(err), errors.Is(err, publishers.ErrUnavailable):
		return err
	case errors.Is(err, ErrClosed):
		return publishers.Unavailable(err) // not the messages' fault: spend no attempt
	case errors.Is(err, ErrInvalidMessage):
		return publishers.Permanent(err)
	case errors.As(err, &status):
		switch {
		case !transientStatus(status.Code):
			return publishers.Permanent(err)
		case status.RetryAfter > 0:
			return publishers.RetryAfter(err, status.RetryAfter)
		default:
			return err
		}
	case errors.Is(err, ErrTimeout), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	default:
		return publishers.Unavailable(err)
	}
}

// maxRetryAfter bounds what Retry-After can ask for; the relay bounds it
// further by its BackoffMax.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads a Retry-After header (RFC 9110, 10.2.3): a number
// of seconds or an HTTP date, relative to now. It returns 0 for an absent,
// invalid or past value.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	secs, err := strconv.ParseUint(v, 10, 64)
	switch {
	case err == nil:
		return time.Duration(min(secs, uint64(maxRetryAfter/time.Second))) * time.Second
	case errors.Is(err, strconv.ErrRange):
		return maxRetryAfter // digits, too many
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

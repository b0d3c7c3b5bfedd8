package publishers

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnavailable marks a failure of the whole sink (connection refused, no
// broker answers). Test with errors.Is.
var ErrUnavailable = errors.New("sink unavailable")

// Unavailable wraps err so that errors.Is(err, ErrUnavailable) holds. It
// returns nil for a nil err.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "sink unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error {
	return []error{ErrUnavailable, e.err}
}

// PermanentError marks a failure that retrying cannot fix.
type PermanentError struct{ Err error }

// Error implements error.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a *PermanentError. It returns nil for a nil err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is or wraps a *PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// Class is how the relay treats one message's publish outcome.
type Class int

// The classes of a publish outcome, as ClassOf sorts errors.
const (
	// ClassAcknowledged: no error, the sink took the message.
	ClassAcknowledged Class = iota
	// ClassTransient: a failure of the message that a retry may fix; it
	// spends one of the message's attempts.
	ClassTransient
	// ClassUnavailable: the sink could not be reached (ErrUnavailable); no
	// attempt is spent.
	ClassUnavailable
	// ClassPermanent: a failure no retry can fix (*PermanentError); the
	// message fails at once.
	ClassPermanent
)

// ClassOf returns the class of err as one message's publish outcome: nil
// is ClassAcknowledged; a permanent error is ClassPermanent even when it
// also wraps ErrUnavailable.
func ClassOf(err error) Class {
	switch {
	case err == nil:
		return ClassAcknowledged
	case IsPermanent(err):
		return ClassPermanent
	case errors.Is(err, ErrUnavailable):
		return ClassUnavailable
	default:
		return ClassTransient
	}
}

// String returns the class's name: "acknowledged", "transient",
// "unavailable" or "permanent".
func (c Class) String() string {
	switch c {
	case ClassAcknowledged:
		return "acknowledged"
	case ClassTransient:
		return "transient"
	case ClassUnavailable:
		return "unavailable"
	case ClassPermanent:
		return "permanent"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// RetryAfterError is a transient failure for which the destination said
// when to try again (an HTTP 429 or 503 with Retry-After, say).
type RetryAfterError struct {
	Err   error
	After time.Duration
}

// Error implements error.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.Err, e.After)
}

// Unwrap returns the cause.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err as a transient failure not to be retried before
// after has passed. The relay waits at least that long, and at most
// BackoffMax, before the message's next attempt. It returns nil for a nil
// err.
func RetryAfter(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, After: after}
}

// RetryAfterOf returns the wait a RetryAfterError in err's chain asks for.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *RetryAfterError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}

// Errors is a per-message result of a partially failed Publish: Errors[i]
// belongs to the i-th message and is nil when it was acknowledged.
type Errors []error

// Error implements error by summarising the failures.
func (e Errors) Error() string {
	failed, first := 0, error(nil)
	for _, err := range e {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if failed == 0 {
		return "no errors"
	}
	return fmt.Sprintf("%d of %d messages failed; first: %v", failed, len(e), first)
}

// Summarize turns per-message results into a Publish's return value, the
// inverse of PerMessage: nil when every message succeeded, the first error
// when every message failed because the sink is unavailable (one error for
// the batch), and an Errors otherwise.
func Summarize(results []error) error {
	failed, unavailable := 0, 0
	for _, err := range results {
		if err != nil {
			failed++
			if errors.Is(err, ErrUnavailable) {
				unavailable++
			}
		}
	}
	switch {
	case failed == 0:
		return nil
	case unavailable == len(results):
		return results[0]
	default:
		return Errors(results)
	}
}

// PerMessage expands the result of a Publish of n messages into one error
// per message: nil when all succeeded, the entries of an Errors of length n,
// or the same error for every message otherwise.
func PerMessage(err error, n int) []error {
	out := make([]error, n)
	if err == nil {
		return out
	}
	var each Errors
	if errors.As(err, &each) && len(each) == n {
		copy(out, each)
		return out
	}
	for i := range out {
		out[i] = err
	}
	return out
}

// Describe shortens err to one line of valid UTF-8 without NUL bytes, at
// most about 1000 bytes, fit for the last_error column.
func Describe(err error) string {
	s := strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\x00", "").Replace(err.Error())
	const max = 1000
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

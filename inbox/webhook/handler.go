package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Defaults applied by NewHandler to zero Config fields.
const (
	// DefaultTolerance is the default Config.Tolerance: the 5 minutes the
	// Standard Webhooks specification recommends.
	DefaultTolerance = 5 * time.Minute
	// DefaultMaxBodyBytes is the default Config.MaxBodyBytes: the
	// writer's default payload limit (outbox.DefaultMaxPayloadBytes,
	// 1 MiB).
	DefaultMaxBodyBytes = outbox.DefaultMaxPayloadBytes
)

// HeaderDuplicate is set to "true" on the answer to a request whose event
// was applied before (process reported a duplicate).
const HeaderDuplicate = "Inbox-Duplicate"

var (
	// ErrInvalidConfig is wrapped by the errors NewHandler returns for an
	// invalid Config; each names the field, never a secret.
	ErrInvalidConfig = errors.New("webhook: invalid config")
	// ErrPermanent marks an error of process that no retry will cure (the
	// event is invalid for this consumer): the Handler answers 422, which
	// the relay records as a failed event instead of retrying it. Wrap it
	// with Permanent.
	ErrPermanent = errors.New("webhook: permanent failure")
)

// Permanent returns err marked with ErrPermanent; nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// Config configures a Handler. Only Secrets is required.
type Config struct {
	// Secrets are the signing secrets of the relay's webhook sink, each
	// "whsec_" followed by the base64 of a key of at least 24 bytes. A
	// request is verified when one of its signatures matches one of them,
	// so that a secret can be rotated: list the old and the new one until
	// the sink has switched. At least one is required.
	Secrets []string
	// Tolerance is how far webhook-timestamp may be from the receiver's
	// clock, in the past or the future, against replayed requests.
	// Defaults to DefaultTolerance (5 minutes).
	Tolerance time.Duration
	// MaxBodyBytes bounds the body read; a longer one is answered 413.
	// Keep it at least the writer's MaxPayloadBytes. Defaults to
	// DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
}

// String implements fmt.Stringer: the secrets are redacted (counted).
func (c Config) String() string {
	return fmt.Sprintf("webhook.Config{Secrets:%d redacted Tolerance:%s MaxBodyBytes:%d}", len(c.Secrets), c.Tolerance, c.MaxBodyBytes)
}

// GoString is like String, so that %#v redacts the secrets too.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer: the secrets are redacted (counted).
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("secrets", fmt.Sprintf("%d redacted", len(c.Secrets))),
		slog.Duration("tolerance", c.Tolerance),
		slog.Int64("max_body_bytes", c.MaxBodyBytes),
	)
}

// Handler is an http.Handler that receives the requests of the relay's
// webhook sink (publishers/webhook): it verifies each, turns it into an
// inbox.Message and passes it to the process function. Its status codes
// are those the sink classifies as the outcome asks; see the package
// documentation.
type Handler struct {
	verifier *verifier
	maxBody  int64
	process  func(ctx context.Context, m inbox.Message) (duplicate bool, err error)
}

// NewHandler returns the Handler of cfg, which calls process with each
// verified message and the request's context. process applies the
// message once, typically through Inbox.Handle:
//
//	func(ctx context.Context, m inbox.Message) (bool, error) {
//		return in.Handle(ctx, pool, m, apply)
//	}
//
// It is called concurrently, once per request.
func NewHandler(cfg Config, process func(ctx context.Context, m inbox.Message) (duplicate bool, err error)) (*Handler, error) {
	if process == nil {
		return nil, fmt.Errorf("%w: process is nil", ErrInvalidConfig)
	}
	switch {
	case cfg.Tolerance < 0:
		return nil, fmt.Errorf("%w: Tolerance %v is negative", ErrInvalidConfig, cfg.Tolerance)
	case cfg.Tolerance == 0:
		cfg.Tolerance = DefaultTolerance
	}
	switch {
	case cfg.MaxBodyBytes < 0:
		return nil, fmt.Errorf("%w: MaxBodyBytes %d is negative", ErrInvalidConfig, cfg.MaxBodyBytes)
	case cfg.MaxBodyBytes == 0:
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	v, err := newVerifier(cfg.Secrets, cfg.Tolerance)
	if err != nil {
		return nil, err
	}
	return &Handler{verifier: v, maxBody: cfg.MaxBodyBytes, process: process}, nil
}

// ServeHTTP answers a request of the sink:
//
//   - 405 to a method other than POST;
//   - 413 to a body over Config.MaxBodyBytes;
//   - 401 when the signature does not verify, or the timestamp is out of
//     tolerance;
//   - 400 when the verified request is not a message (no valid event id);
//   - 500 when process fails, 422 when its error wraps ErrPermanent, with
//     the error's text as the body;
//   - 204 when process succeeded, with HeaderDuplicate "true" when the
//     message was a duplicate.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("webhook: body over %d bytes", h.maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "webhook: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := h.verifier.verify(r.Header, body, time.Now()); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	m, err := message(r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	duplicate, err := h.process(r.Context(), m)
	switch {
	case errors.Is(err, ErrPermanent):
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		if duplicate {
			w.Header().Set(HeaderDuplicate, "true")
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

package webhook

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/stdwebhooks"
	sink "github.com/outboxrelay/outboxrelay/publishers/webhook"
)

// errUnverified is wrapped by every verification failure.
var errUnverified = errors.New("webhook: request not verified")

// verifier checks Standard Webhooks signatures against a set of keys.
type verifier struct {
	keys      [][]byte
	tolerance time.Duration
}

// newVerifier decodes secrets. Its errors name a secret by its index,
// never by its text.
func newVerifier(secrets []string, tolerance time.Duration) (*verifier, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%w: Secrets: at least one is required", ErrInvalidConfig)
	}
	v := &verifier{tolerance: tolerance}
	for i, s := range secrets {
		key, err := stdwebhooks.ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("%w: Secrets[%d]: %s", ErrInvalidConfig, i, err)
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// verify checks that h carries webhook-id, webhook-timestamp and
// webhook-signature, that the timestamp is within the tolerance of now,
// past or future, and that one "v1,<base64>" entry of the signature
// equals the HMAC-SHA256 of "<id>.<timestamp>.<body>" under one of the
// keys, compared in constant time. Its errors wrap errUnverified.
func (v *verifier) verify(h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get(sink.HeaderWebhookID), h.Get(sink.HeaderWebhookTimestamp), h.Get(sink.HeaderWebhookSignature)
	for _, h := range [][2]string{{sink.HeaderWebhookID, id}, {sink.HeaderWebhookTimestamp, ts}, {sink.HeaderWebhookSignature, sigs}} {
		if h[1] == "" {
			return fmt.Errorf("%w: no %s header", errUnverified, h[0])
		}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", errUnverified, sink.HeaderWebhookTimestamp, truncate(ts, 32))
	}
	if skew := now.Sub(time.Unix(secs, 0)); skew > v.tolerance || skew < -v.tolerance {
		return fmt.Errorf("%w: %s %d is %v from now, beyond the tolerance of %v (check both clocks)", errUnverified, sink.HeaderWebhookTimestamp, secs, skew.Round(time.Second), v.tolerance)
	}
	macs := make([][]byte, len(v.keys))
	for i, key := range v.keys {
		macs[i] = stdwebhooks.MAC(key, id, ts, body)
	}
	for _, entry := range strings.Split(sigs, " ") {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue // another scheme, or not an entry
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		for _, want := range macs {
			if hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no v1 signature in %s matches a secret", errUnverified, sink.HeaderWebhookSignature)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

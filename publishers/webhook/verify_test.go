package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// verifySignature checks a request as a Standard Webhooks receiver does,
// written from the specification and sharing no code with the sink: the
// webhook-id, webhook-timestamp and webhook-signature headers are present,
// the timestamp is within 5 minutes of now, and one of the space-separated
// "v1,<base64>" signatures equals HMAC-SHA256 under the key of secret
// ("whsec_" + base64) of "<id>.<timestamp>.<body>", compared in constant
// time.
func verifySignature(h http.Header, body []byte, secret string, now time.Time) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("missing a header: webhook-id %q, webhook-timestamp %q, webhook-signature %q", id, ts, sigs)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q is not Unix seconds", ts)
	}
	if skew := now.Sub(time.Unix(secs, 0)); skew > 5*time.Minute || skew < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %s is %v away from now", ts, skew)
	}
	return verifyAt(id, ts, sigs, body, secret)
}

// verifyAt checks the signatures without the timestamp tolerance.
func verifyAt(id, ts, sigs string, body []byte, secret string) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("the test's secret: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Split(sigs, " ") {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no v1 signature matches")
}

// The verifier itself passes the Standard Webhooks reference test vector
// (the Go library's TestWebhookSign) and refuses what it should.
func TestVerifierAgainstTheSpecVector(t *testing.T) {
	t.Parallel()
	const (
		secret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id      = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts      = "1614265330"
		payload = `{"test": 2432232314}`
		sig     = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	if err := verifyAt(id, ts, sig, []byte(payload), secret); err != nil {
		t.Fatalf("the spec's vector: %v", err)
	}
	if err := verifyAt(id, ts, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= "+sig, []byte(payload), secret); err != nil {
		t.Errorf("the vector among other signatures: %v", err)
	}
	for name, c := range map[string]struct{ id, ts, sigs, body string }{
		"other body":      {id, ts, sig, payload + " "},
		"other id":        {id + "x", ts, sig, payload},
		"other timestamp": {id, "1614265331", sig, payload},
		"other version":   {id, ts, "v2," + strings.TrimPrefix(sig, "v1,"), payload},
	} {
		if err := verifyAt(c.id, c.ts, c.sigs, []byte(c.body), secret); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", sig)
	if err := verifySignature(h, []byte(payload), secret, time.Unix(1614265330, 0).Add(6*time.Minute)); err == nil {
		t.Error("a timestamp 6 minutes old verified")
	}
}

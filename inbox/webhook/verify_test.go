package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks reference test vector (the Go library's
// TestWebhookSign).
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTS     = "1614265330"
	vectorBody   = `{"test": 2432232314}`
	vectorSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var vectorTime = time.Unix(1614265330, 0)

// otherSecret is a second valid secret, for rotation.
var otherSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("another key of 32 bytes, for tests"))

// entry returns the "v1,<base64>" entry of secret over id.ts.body, written
// from the specification (the vector checks it).
func entry(t *testing.T, secret, id, ts, body string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func header(id, ts, sig string) http.Header {
	h := http.Header{}
	for name, v := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig} {
		if v != "" {
			h.Set(name, v)
		}
	}
	return h
}

func mustVerifier(t *testing.T, secrets ...string) *verifier {
	t.Helper()
	v, err := newVerifier(secrets, DefaultTolerance)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVerify(t *testing.T) {
	t.Parallel()
	if got := entry(t, vectorSecret, vectorID, vectorTS, vectorBody); got != vectorSig {
		t.Fatalf("the test's signer gives %s for the spec's vector, want %s", got, vectorSig)
	}
	valid := entry(t, otherSecret, vectorID, vectorTS, vectorBody)
	ts := func(d time.Duration) string { return strconv.FormatInt(vectorTime.Add(d).Unix(), 10) }
	at := func(d time.Duration) string { return entry(t, vectorSecret, vectorID, ts(d), vectorBody) }
	for _, c := range []struct {
		name     string
		secrets  []string
		id, ts   string
		sig      string
		body     string
		ok       bool
		errorHas string
	}{
		{name: "spec vector", secrets: []string{vectorSecret}, sig: vectorSig, ok: true},
		{name: "wrong secret", secrets: []string{otherSecret}, sig: vectorSig, errorHas: "no v1 signature"},
		{name: "rotation: old and new secret, signed with the old", secrets: []string{otherSecret, vectorSecret}, sig: vectorSig, ok: true},
		{name: "rotation: old and new secret, signed with the new", secrets: []string{vectorSecret, otherSecret}, sig: valid, ok: true},
		{name: "rotation: signed with both, one secret known", secrets: []string{otherSecret}, sig: vectorSig + " " + valid, ok: true},
		{name: "tampered body", secrets: []string{vectorSecret}, sig: vectorSig, body: vectorBody + " ", errorHas: "no v1 signature"},
		{name: "tampered id", secrets: []string{vectorSecret}, sig: vectorSig, id: vectorID + "x", errorHas: "no v1 signature"},
		{name: "tampered timestamp", secrets: []string{vectorSecret}, sig: vectorSig, ts: ts(time.Second), errorHas: "no v1 signature"},
		{name: "5 minutes old", secrets: []string{vectorSecret}, ts: ts(-5 * time.Minute), sig: at(-5 * time.Minute), ok: true},
		{name: "5 minutes ahead", secrets: []string{vectorSecret}, ts: ts(5 * time.Minute), sig: at(5 * time.Minute), ok: true},
		{name: "stale", secrets: []string{vectorSecret}, ts: ts(-5*time.Minute - time.Second), sig: at(-5*time.Minute - time.Second), errorHas: "beyond the tolerance"},
		{name: "future", secrets: []string{vectorSecret}, ts: ts(5*time.Minute + time.Second), sig: at(5*time.Minute + time.Second), errorHas: "beyond the tolerance"},
		{name: "timestamp not seconds", secrets: []string{vectorSecret}, ts: vectorTS + ".5", sig: vectorSig, errorHas: "not Unix seconds"},
		{name: "no webhook-id", secrets: []string{vectorSecret}, id: "-", sig: vectorSig, errorHas: "no webhook-id"},
		{name: "no webhook-timestamp", secrets: []string{vectorSecret}, ts: "-", sig: vectorSig, errorHas: "no webhook-timestamp"},
		{name: "no webhook-signature", secrets: []string{vectorSecret}, sig: "-", errorHas: "no webhook-signature"},
		{name: "other version only", secrets: []string{vectorSecret}, sig: "v1a," + strings.TrimPrefix(vectorSig, "v1,"), errorHas: "no v1 signature"},
		{name: "no comma", secrets: []string{vectorSecret}, sig: strings.Replace(vectorSig, ",", "", 1), errorHas: "no v1 signature"},
		{name: "not base64", secrets: []string{vectorSecret}, sig: "v1,!!!", errorHas: "no v1 signature"},
		{name: "truncated", secrets: []string{vectorSecret}, sig: vectorSig[:len(vectorSig)-4], errorHas: "no v1 signature"},
		{name: "malformed entries before a valid one", secrets: []string{vectorSecret}, sig: "v1 v1,!!! v2,abc  " + vectorSig, ok: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, ts, body := or(c.id, vectorID), or(c.ts, vectorTS), or(c.body, vectorBody)
			err := mustVerifier(t, c.secrets...).verify(header(id, ts, or(c.sig, "")), []byte(body), vectorTime)
			switch {
			case c.ok && err != nil:
				t.Fatalf("not verified: %v", err)
			case c.ok:
			case err == nil:
				t.Fatal("verified")
			case !errors.Is(err, errUnverified) || !strings.Contains(err.Error(), c.errorHas):
				t.Fatalf("error %q, want errUnverified saying %q", err, c.errorHas)
			}
			for _, s := range c.secrets {
				if err != nil && strings.Contains(err.Error(), strings.TrimPrefix(s, "whsec_")) {
					t.Errorf("the error shows a secret: %v", err)
				}
			}
		})
	}
}

// or returns v, or def when v is empty; "-" stands for empty.
func or(v, def string) string {
	switch v {
	case "":
		return def
	case "-":
		return ""
	}
	return v
}

func TestNewVerifierRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("23 bytes are too short!"))
	for name, secrets := range map[string][]string{
		"none":          nil,
		"no prefix":     {strings.TrimPrefix(vectorSecret, "whsec_")},
		"not base64":    {"whsec_not*base64*at*all"},
		"short key":     {short},
		"second is bad": {vectorSecret, "whsec_%%%%secret-text%%%%"},
	} {
		_, err := newVerifier(secrets, DefaultTolerance)
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: error %v, want ErrInvalidConfig", name, err)
			continue
		}
		for _, s := range secrets {
			if b64 := strings.TrimPrefix(s, "whsec_"); strings.Contains(err.Error(), b64) {
				t.Errorf("%s: the error shows the secret: %v", name, err)
			}
		}
	}
}

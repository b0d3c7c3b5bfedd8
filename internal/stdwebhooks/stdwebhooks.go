// Package stdwebhooks holds the Standard Webhooks signing
// (https://www.standardwebhooks.com) that the webhook sink signs with and
// inbox/webhook verifies with, so that the two cannot drift apart.
package stdwebhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// SecretPrefix starts every symmetric secret of the specification.
const SecretPrefix = "whsec_"

// MinSecretBytes is the shortest key the specification allows.
const MinSecretBytes = 24

// ParseSecret decodes a "whsec_<base64>" secret into its key. Its errors
// never quote the secret.
func ParseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, errors.New("must start with " + SecretPrefix + " followed by the base64 of the key")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("the text after " + SecretPrefix + " is not standard base64")
	}
	if len(key) < MinSecretBytes {
		return nil, fmt.Errorf("the key is %d bytes; the Standard Webhooks specification asks for at least %d", len(key), MinSecretBytes)
	}
	return key, nil
}

// MAC returns HMAC-SHA256(key, "<id>.<timestamp>.<body>"), the signature
// that a "v1," entry of the webhook-signature header carries in base64.
func MAC(key []byte, id, timestamp string, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// secretPrefix starts every symmetric secret of the Standard Webhooks
// specification.
const secretPrefix = "whsec_"

// minSecretBytes is the shortest key the specification allows.
const minSecretBytes = 24

// parseSecret decodes a "whsec_<base64>" secret into its key. Its errors
// never quote the secret.
func parseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, errors.New("must start with " + secretPrefix + " followed by the base64 of the key")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("the text after " + secretPrefix + " is not standard base64")
	}
	if len(key) < minSecretBytes {
		return nil, fmt.Errorf("the key is %d bytes; the Standard Webhooks specification asks for at least %d", len(key), minSecretBytes)
	}
	return key, nil
}

// sign returns the webhook-signature header of a request: one
// "v1,<base64 of HMAC-SHA256(key, id.timestamp.body)>" per key, separated
// by spaces, in the order of the keys.
func sign(keys [][]byte, id string, timestamp int64, body []byte) string {
	var b strings.Builder
	ts := strconv.FormatInt(timestamp, 10)
	for i, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

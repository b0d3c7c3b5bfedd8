package webhook

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/stdwebhooks"
)

// sign returns the webhook-signature header of a request: one
// "v1,<base64 of HMAC-SHA256(key, id.timestamp.body)>" per key, separated
// by spaces, in the order of the keys.
func sign(keys [][]byte, id string, timestamp int64, body []byte) string {
	var b strings.Builder
	ts := strconv.FormatInt(timestamp, 10)
	for i, key := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(stdwebhooks.MAC(key, id, ts, body)))
	}
	return b.String()
}

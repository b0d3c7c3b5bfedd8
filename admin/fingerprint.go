package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// The parts of an error text that differ from one row to the next, in the
// order Pattern replaces them: quoted values first (whatever they hold),
// then UUIDs, network addresses, hex ids, and numbers with their unit.
var (
	quotedRe = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|` + "`[^`]*`" + `|(^|[^\p{L}\p{N}_])'(?:[^'\\]|\\.)*'`)
	uuidRe   = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	addrRe   = regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-fA-F:.]*:[0-9a-fA-F:.]*\](?::\d+)?`)
	hexRe    = regexp.MustCompile(`(?i)\b0x[0-9a-f]+\b|\b[0-9a-f]*\d[0-9a-f]*[a-f][0-9a-f]*\b|\b[0-9a-f]*[a-f][0-9a-f]*\d[0-9a-f]*\b`)
	numberRe = regexp.MustCompile(`\b(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+\b|\b\d+(?:\.\d+)?(?:[kKMGT]i?B|B|ns|us|µs|ms|s|m|h)?\b`)
)

// Pattern is lastError with what varies between rows of one cause
// replaced: quoted values ('...', "...", `...`) by <q>, UUIDs and hex ids
// (eight or more hex digits, or 0x...) by <id>, IP addresses with their
// port by <addr>, and numbers, with a duration or size unit if any, by
// <n>. Words and names, such as a sink's ("kafka:", "webhook: POST
// https://hooks.example.com/..."), stay.
func Pattern(lastError string) string {
	s := quotedRe.ReplaceAllString(lastError, "$1<q>")
	s = uuidRe.ReplaceAllString(s, "<id>")
	s = addrRe.ReplaceAllString(s, "<addr>")
	s = hexRe.ReplaceAllStringFunc(s, func(h string) string {
		if len(h) < 8 && !strings.HasPrefix(strings.ToLower(h), "0x") {
			return h // a short word such as "3a" or "b2c": not an id
		}
		return "<id>"
	})
	return numberRe.ReplaceAllString(s, "<n>")
}

// ErrorClass names how the relay failed a row, from the start of
// last_error as the relay writes it: "parked" (ordered delivery's
// head-of-line policy), "exhausted" (transient failures until max
// attempts: "attempt N of M: ..."), "permanent" (the sink refused it),
// "malformed" (the row could not be read), "too large", "rescued" (claimed
// more than max attempts without an outcome), or "other".
func ErrorClass(lastError string) string {
	s := lastError
	switch {
	case strings.HasPrefix(s, "parked: "):
		return "parked"
	case strings.HasPrefix(s, "permanent: "):
		return "permanent"
	case strings.HasPrefix(s, "malformed row: "):
		return "malformed"
	case strings.HasPrefix(s, "event too large: "):
		return "too large"
	case strings.HasPrefix(s, "attempt "):
		if strings.Contains(strings.SplitN(s, ":", 2)[0], " exceeds max attempts ") {
			return "rescued"
		}
		return "exhausted"
	}
	return "other"
}

// Fingerprint is the failure group of a failed row: 16 hex digits of a
// hash of its topic, ErrorClass and Pattern of its last_error. Rows that
// failed for the same reason on the same topic share it, whatever ids,
// numbers or quoted values their errors name; it is stable across
// releases as long as Pattern's rules are.
func Fingerprint(topic, lastError string) string {
	h := sha256.Sum256([]byte(topic + "\x00" + ErrorClass(lastError) + "\x00" + Pattern(lastError)))
	return hex.EncodeToString(h[:8])
}

package redisstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Field names of a stream entry, in the order XADD writes them.
const (
	// FieldEventID holds the event id in canonical UUID form.
	FieldEventID = "event_id"
	// FieldKey holds the outbox key, byte for byte. An entry of a message
	// without a key (a nil Key) has no such field; an empty, non-nil key
	// is an empty value.
	FieldKey = "key"
	// FieldPayload holds the payload, byte for byte.
	FieldPayload = "payload"
	// FieldHeaders holds the headers as a JSON object of strings ("{}"
	// when there are none).
	FieldHeaders = "headers"
	// FieldCreatedAt holds the time the event was written to the outbox,
	// RFC 3339 in UTC with nanoseconds; absent when unknown.
	FieldCreatedAt = "created_at"
)

// streamKey returns the stream of topic, or a permanent-worthy error when
// the key is not one the sink writes to.
func streamKey(prefix, topic string) (string, error) {
	if topic == "" {
		return "", fmt.Errorf("%w: empty topic", ErrInvalidStream)
	}
	key := prefix + topic
	if err := validStreamKey(key, false); err != nil {
		return "", fmt.Errorf("%w: stream %q: %v", ErrInvalidStream, key, err)
	}
	return key, nil
}

// validStreamKey checks a stream key (or, with prefix, the StreamPrefix
// that starts every key): at most MaxStreamKeyLen bytes of valid UTF-8
// without control characters or white space. Redis takes any bytes; these
// rules keep keys that tools and people can type and read.
func validStreamKey(key string, prefix bool) error {
	switch {
	case len(key) > MaxStreamKeyLen:
		return fmt.Errorf("%d bytes, longer than %d", len(key), MaxStreamKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("not valid UTF-8")
	}
	for i, r := range key {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return fmt.Errorf("character %q at offset %d is a control character or white space", r, i)
		}
	}
	if key == "" && !prefix {
		return fmt.Errorf("empty")
	}
	return nil
}

// entry is one XADD's fields and values, and their size in bytes.
type entry struct {
	values []any
	size   int
}

// entryValues is the most values an entry has: five fields and their
// values.
const entryValues = 10

// toEntry converts m to the fields of its stream entry: event_id, key
// (only when m has one), payload, headers, created_at (only when known).
// The outbox.HeaderEventID header is reserved: the real id wins. The
// values are appended to buf[:0], which holds entryValues of them without
// growing when the caller slices one array for many entries.
func toEntry(m *outbox.Message, buf []any) entry {
	values := append(buf[:0], FieldEventID, m.ID.String())
	if m.Key != nil {
		values = append(values, FieldKey, m.Key)
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	values = append(values, FieldPayload, payload, FieldHeaders, headersJSON(m.Headers))
	if !m.CreatedAt.IsZero() {
		values = append(values, FieldCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	size := 0
	for _, v := range values {
		switch v := v.(type) {
		case string:
			size += len(v)
		case []byte:
			size += len(v)
		}
	}
	return entry{values: values, size: size}
}

// headersJSON encodes h as a JSON object, names sorted, without HTML
// escaping; outbox.HeaderEventID is left out.
func headersJSON(h map[string]string) string {
	if len(h) == 0 {
		return "{}"
	}
	names := make([]string, 0, len(h))
	size := 2
	for name, value := range h {
		if name != outbox.HeaderEventID {
			names = append(names, name)
			size += len(name) + len(value) + 6
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name)
		b = append(b, ':')
		b = appendJSONString(b, h[name])
	}
	return string(append(b, '}'))
}

// appendJSONString appends s to b as a JSON string. Printable ASCII other
// than the quote and the backslash is copied as it is; anything else takes
// encoding/json's path (without HTML escaping), which also turns invalid
// UTF-8 into U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

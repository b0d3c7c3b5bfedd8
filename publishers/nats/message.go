package natssink

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Headers the sink sets besides the message's own.
const (
	// HeaderKey carries the outbox key when it is valid UTF-8 without
	// control characters and without leading or trailing white space,
	// byte for byte. An empty key is the header with an empty value.
	HeaderKey = "outbox-key"
	// HeaderKeyBase64 carries any other key, in standard base64 with
	// padding. A message carries HeaderKey or HeaderKeyBase64, or neither
	// when it has no key.
	HeaderKeyBase64 = "outbox-key-base64"
)

// MaxSubjectLen is the longest subject Publish sends, in bytes. The server
// closes a connection whose protocol line (subject, reply subject and
// sizes) exceeds its max_control_line (4 KiB by default); this limit keeps
// well clear of it.
const MaxSubjectLen = 1024

// toNATS converts an outbox message to the NATS message Publish sends: the
// topic as subject, the payload as data, and as headers the message's own,
// the event id twice (outbox.HeaderEventID for consumers, Nats-Msg-Id for
// the stream's duplicate window) and the key (HeaderKey or
// HeaderKeyBase64). It returns a permanent error when the message cannot
// be carried intact, or is larger than maxPayload.
func toNATS(m *outbox.Message, maxPayload int64) (*nats.Msg, error) {
	if err := validateSubject(m.Topic); err != nil {
		return nil, err
	}
	h := make(nats.Header, len(m.Headers)+3)
	for name, value := range m.Headers {
		if name == outbox.HeaderEventID {
			continue // reserved; the real id wins
		}
		if err := validateHeader(name, value); err != nil {
			return nil, err
		}
		h[name] = []string{value}
	}
	id := m.ID.String()
	h[outbox.HeaderEventID] = []string{id}
	h[jetstream.MsgIDHeader] = []string{id}
	if m.Key != nil {
		if carriesRaw(m.Key) {
			h[HeaderKey] = []string{string(m.Key)}
		} else {
			h[HeaderKeyBase64] = []string{base64.StdEncoding.EncodeToString(m.Key)}
		}
	}
	if size := headerSize(h) + len(m.Payload); int64(size) > maxPayload {
		return nil, fmt.Errorf("%w: %d bytes (payload %d, headers %d), over %d",
			ErrMessageTooLarge, size, len(m.Payload), size-len(m.Payload), maxPayload)
	}
	return &nats.Msg{Subject: m.Topic, Header: h, Data: m.Payload}, nil
}

// validateSubject checks that subject is one a stream can capture and the
// sink may publish to: 1 to MaxSubjectLen bytes of UTF-8, tokens separated
// by '.', none empty, without white space, control characters or the
// wildcards '*' and '>', and not one of the server's own ('$JS.API...',
// '$SYS...': any subject whose first token starts with '$').
func validateSubject(subject string) error {
	switch {
	case subject == "":
		return fmt.Errorf("%w: empty", ErrInvalidSubject)
	case len(subject) > MaxSubjectLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidSubject, len(subject), MaxSubjectLen)
	case !utf8.ValidString(subject):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidSubject, subject)
	case subject[0] == '$':
		return fmt.Errorf("%w: %q: subjects starting with '$' are the server's own (JetStream API, system account)", ErrInvalidSubject, subject)
	}
	for i := 0; i < len(subject); i++ {
		switch c := subject[i]; {
		case c <= ' ' || c == 0x7f:
			return fmt.Errorf("%w: %q has white space or a control character at byte %d", ErrInvalidSubject, subject, i)
		case c == '*' || c == '>':
			return fmt.Errorf("%w: %q has the wildcard %q at byte %d: publish to a literal subject", ErrInvalidSubject, subject, c, i)
		}
	}
	if strings.HasPrefix(subject, ".") || strings.HasSuffix(subject, ".") || strings.Contains(subject, "..") {
		return fmt.Errorf("%w: %q has an empty token (a leading, trailing or doubled '.')", ErrInvalidSubject, subject)
	}
	return nil
}

// validateHeader checks that a header of the message can be carried intact
// and does not take a name the sink or the server reserves.
func validateHeader(name, value string) error {
	lower := strings.ToLower(name)
	switch {
	case strings.HasPrefix(lower, "nats-"):
		return fmt.Errorf("%w: %q: names starting with Nats- are read by the server (Nats-Msg-Id, Nats-Expected-..., Nats-Rollup, Nats-TTL)", ErrInvalidHeader, name)
	case lower == HeaderKey || lower == HeaderKeyBase64:
		return fmt.Errorf("%w: %q is reserved for the message key", ErrInvalidHeader, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return fmt.Errorf("%w: name %q has %q, which NATS header names cannot hold", ErrInvalidHeader, name, c)
		}
	}
	if !roundTrips(value) {
		return fmt.Errorf("%w: the value of %q has a line break, or white space at its start or end, which NATS headers do not keep", ErrInvalidHeader, name)
	}
	return nil
}

// roundTrips reports whether a header value arrives unchanged: the client
// trims white space around values and turns line breaks into spaces.
func roundTrips(v string) bool {
	if strings.ContainsAny(v, "\r\n") {
		return false
	}
	return v == strings.Trim(v, " \t")
}

// carriesRaw reports whether key goes in HeaderKey as it is: valid UTF-8,
// no control character, nothing a header would change.
func carriesRaw(key []byte) bool {
	if !utf8.Valid(key) {
		return false
	}
	for _, c := range key {
		if c < ' ' || c == 0x7f {
			return false
		}
	}
	return roundTrips(string(key))
}

// headerSize is the size of h encoded as the client sends it:
// "NATS/1.0\r\n", "name: value\r\n" per header, then "\r\n".
func headerSize(h nats.Header) int {
	size := len("NATS/1.0\r\n") + len("\r\n")
	for name, values := range h {
		for _, v := range values {
			size += len(name) + len(": ") + len(v) + len("\r\n")
		}
	}
	return size
}

// Key returns the outbox key a message published by the sink carries in
// h: nil when it has none. A consumer that needs the key bytes calls it
// with the message's headers.
func Key(h nats.Header) ([]byte, error) {
	if v, ok := h[HeaderKeyBase64]; ok && len(v) > 0 {
		key, err := base64.StdEncoding.DecodeString(v[0])
		if err != nil {
			return nil, fmt.Errorf("nats: header %s: %w", HeaderKeyBase64, err)
		}
		return key, nil
	}
	if v, ok := h[HeaderKey]; ok && len(v) > 0 {
		return []byte(v[0]), nil
	}
	return nil, nil
}

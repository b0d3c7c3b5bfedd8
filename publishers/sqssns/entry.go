package sqssns

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Message attributes the sink sets besides the message's headers.
const (
	// AttrKey carries the outbox key, byte for byte, as a Binary attribute;
	// a message without key has none.
	AttrKey = "outbox-key"
	// AttrBodyEncoding is "base64" on a message whose body is its payload
	// in standard base64: a payload that is not text SQS allows (see
	// validBody); and "empty" on a message whose payload is empty, which
	// SQS and SNS refuse as a body: its body is "-". Other messages do not
	// have it.
	AttrBodyEncoding = "outbox-body-encoding"
	// MaxAttributes is the most message attributes SQS and SNS take: the
	// event id, the key and the headers together.
	MaxAttributes = 10
	// maxGroupID is the longest MessageGroupId.
	maxGroupID = 128
)

// Errors of messages the sink cannot carry; each is wrapped by a
// publishers.Permanent.
var (
	ErrMessageTooLarge   = errors.New("sqssns: message too large")
	ErrTooManyAttributes = errors.New("sqssns: too many message attributes")
	ErrInvalidMessage    = errors.New("sqssns: invalid message")
)

// attribute is a message attribute as both services take it.
type attribute struct {
	binary bool
	value  string
}

// wire returns the data type and value a travels with. SQS and SNS refuse
// an empty value, so an empty one travels as "-" with ".empty" appended to
// its type (String.empty, Binary.empty), which a reader maps back to "".
func (a attribute) wire() (dataType, value string) {
	dataType, value = "String", a.value
	if a.binary {
		dataType = "Binary"
	}
	if value == "" {
		return dataType + ".empty", "-"
	}
	return dataType, value
}

// entry is one message as a batch sends it.
type entry struct {
	body         string
	attrs        map[string]attribute
	group, dedup string // set for FIFO destinations only
	size         int
}

// toEntry converts m for a destination (fifo: a .fifo queue or topic). The
// body is the payload (in base64 with AttrBodyEncoding when it is not text
// SQS allows); the attributes are the headers, outbox.HeaderEventID and
// AttrKey. It returns a permanent error when m cannot be carried intact.
func toEntry(m *outbox.Message, fifo bool, maxBytes int) (entry, error) {
	e := entry{body: string(m.Payload), attrs: make(map[string]attribute, len(m.Headers)+3)}
	switch {
	case len(m.Payload) == 0:
		e.body = "-"
		e.attrs[AttrBodyEncoding] = attribute{value: "empty"}
	case !validBody(m.Payload):
		e.body = base64.StdEncoding.EncodeToString(m.Payload)
		e.attrs[AttrBodyEncoding] = attribute{value: "base64"}
	}
	for name, value := range m.Headers {
		if name == outbox.HeaderEventID || name == AttrKey || name == AttrBodyEncoding {
			continue // reserved; the event's own win
		}
		if !validAttrName(name) {
			return entry{}, fmt.Errorf("%w: header %q is not a valid message attribute name", ErrInvalidMessage, name)
		}
		e.attrs[name] = attribute{value: value}
	}
	e.attrs[outbox.HeaderEventID] = attribute{value: m.ID.String()}
	if m.Key != nil {
		e.attrs[AttrKey] = attribute{binary: true, value: string(m.Key)}
	}
	if len(e.attrs) > MaxAttributes {
		return entry{}, fmt.Errorf("%w: %d headers with the event id and key make %d, more than the %d SQS and SNS take",
			ErrTooManyAttributes, len(m.Headers), len(e.attrs), MaxAttributes)
	}
	e.size = len(e.body)
	for name, a := range e.attrs {
		e.size += len(name) + len("Binary") + len(a.value)
	}
	if e.size > maxBytes {
		return entry{}, fmt.Errorf("%w: %d bytes with its attributes, over %d", ErrMessageTooLarge, e.size, maxBytes)
	}
	if fifo {
		e.group, e.dedup = groupID(m), m.ID.String()
	}
	return e, nil
}

// groupID is a FIFO message's MessageGroupId: the key when it is 1 to 128
// printable ASCII characters, "sha256:" and the key's SHA-256 in hex for
// any other key (an empty one too), and the event id for an event without
// key, which then waits for no other.
func groupID(m *outbox.Message) string {
	if m.Key == nil {
		return m.ID.String()
	}
	if len(m.Key) > 0 && len(m.Key) <= maxGroupID && strings.IndexFunc(string(m.Key), func(r rune) bool { return r < '!' || r > '~' }) < 0 {
		return string(m.Key)
	}
	sum := sha256.Sum256(m.Key)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// validBody reports whether b is text SQS takes: UTF-8 of #x9, #xA, #xD,
// #x20 to #xD7FF, #xE000 to #xFFFD and #x10000 to #x10FFFF.
func validBody(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	return strings.IndexFunc(string(b), func(r rune) bool {
		return !(r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000)
	}) < 0
}

// validAttrName reports whether name is a message attribute name: up to
// 256 letters, digits, '-', '_' and '.', no '.' first, last or twice in a
// row, not starting with "AWS." or "Amazon.".
func validAttrName(name string) bool {
	lower := strings.ToLower(name)
	if name == "" || len(name) > 256 || name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, "..") ||
		strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool {
		return !(r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0
}

// Name is the queue or topic name of an outbox topic: each character but
// letters, digits, '-' and '_' becomes '-', except a final ".fifo", which
// stays ("orders.created.fifo" names the FIFO queue orders-created.fifo).
func Name(topic string) string {
	base, fifo := strings.CutSuffix(topic, ".fifo")
	base = strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '-'
	}, base)
	if fifo {
		return base + ".fifo"
	}
	return base
}

// AttributeValue returns the value of a message attribute the sink sent,
// as read back from SQS: the bytes of a Binary one, the text of a String
// one, "" for one sent empty (wire).
func AttributeValue(a sqstypes.MessageAttributeValue) string {
	switch {
	case strings.HasSuffix(aws.ToString(a.DataType), ".empty"):
		return ""
	case a.BinaryValue != nil:
		return string(a.BinaryValue)
	}
	return aws.ToString(a.StringValue)
}

package natssink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
)

func TestValidateSubject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		subject string
		ok      bool
	}{
		{"orders", true},
		{"orders.created", true},
		{"events.orders.eu-west_1.created", true},
		{"Ünïcødé.✓", true},
		{"a.b*c", false},
		{"", false},
		{".orders", false},
		{"orders.", false},
		{"orders..created", false},
		{"orders.*", false},
		{"orders.>", false},
		{">", false},
		{"orders created", false},
		{"orders\tcreated", false},
		{"orders\r\n", false},
		{"orders\x00", false},
		{"orders\x7f", false},
		{"\xff\xfe", false},
		{"$JS.API.STREAM.DELETE.X", false},
		{"$SYS.REQ.SERVER.PING", false},
		{"$KV.bucket.key", false},
		{strings.Repeat("a", MaxSubjectLen), true},
		{strings.Repeat("a", MaxSubjectLen+1), false},
	} {
		err := validateSubject(c.subject)
		if (err == nil) != c.ok {
			t.Errorf("validateSubject(%q) = %v, want ok=%t", c.subject, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("validateSubject(%q) = %v, not ErrInvalidSubject", c.subject, err)
		}
	}
}

func TestValidateHeader(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, value string
		ok          bool
	}{
		{"content-type", "application/json", true},
		{"trace-id", "00-abc-01", true},
		{"unicode", "ünïcødé ✓", true},
		{"empty", "", true},
		{"inner space", "a b", false}, // the name has a space
		{"note", "a b", true},
		{"note", "tab\tinside", true},
		{"note", "escape \x1b[31m", true},
		{"note", " leading", false},
		{"note", "trailing ", false},
		{"note", "\ttab", false},
		{"note", "two\nlines", false},
		{"note", "cr\r", false},
		{"a:b", "x", false},
		{"a/b", "x", false},
		{"a(b)", "x", false},
		{"a@b", "x", false},
		{"Nats-Msg-Id", "x", false},
		{"nats-rollup", "all", false},
		{"NATS-TTL", "1s", false},
		{"natsy", "x", true},
		{"outbox-key", "k", false},
		{"Outbox-Key-Base64", "aw==", false},
	} {
		err := validateHeader(c.name, c.value)
		if (err == nil) != c.ok {
			t.Errorf("validateHeader(%q, %q) = %v, want ok=%t", c.name, c.value, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidHeader) {
			t.Errorf("validateHeader(%q, %q) = %v, not ErrInvalidHeader", c.name, c.value, err)
		}
	}
}

// headerSize is what the client puts on the wire, so that the size check
// before sending matches the server's max_payload check.
func TestHeaderSizeMatchesTheClient(t *testing.T) {
	t.Parallel()
	m := outbox.Message{
		ID: uuid.New(), Topic: "orders.created", Key: []byte{0, 1, 2}, Payload: []byte("payload"),
		Headers: map[string]string{"content-type": "application/json", "unicode": "ünïcødé ✓", "empty": ""},
	}
	msg, err := toNATS(&m, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := headerSize(msg.Header), msg.Size()-len(msg.Subject)-len(msg.Data); got != want {
		t.Errorf("headerSize = %d, the client's encoding is %d bytes", got, want)
	}
	limit := int64(headerSize(msg.Header) + len(m.Payload))
	if _, err := toNATS(&m, limit); err != nil {
		t.Errorf("a message of exactly max_payload bytes: %v", err)
	}
	if _, err := toNATS(&m, limit-1); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("a message one byte over max_payload: %v, want ErrMessageTooLarge", err)
	}
}

// toNATS writes the event id in both headers, overriding a header of the
// message that claims to be the event id.
func TestEventIDHeaders(t *testing.T) {
	t.Parallel()
	m := outbox.Message{ID: uuid.New(), Topic: "orders", Headers: map[string]string{outbox.HeaderEventID: "forged"}}
	msg, err := toNATS(&m, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{outbox.HeaderEventID, jetstream.MsgIDHeader} {
		if got := msg.Header.Values(name); len(got) != 1 || got[0] != m.ID.String() {
			t.Errorf("header %s = %q, want [%s]", name, got, m.ID)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	api := func(code jetstream.ErrorCode, desc string) error {
		return &jetstream.APIError{Code: 400, ErrorCode: code, Description: desc}
	}
	wrap := func(err error) error { return fmt.Errorf("nats: subject %q: event x: %w", "s", err) }
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"invalid subject", ErrInvalidSubject, "permanent"},
		{"invalid header", ErrInvalidHeader, "permanent"},
		{"too large here", ErrMessageTooLarge, "permanent"},
		{"too large, client", nats.ErrMaxPayload, "permanent"},
		{"no stream", ErrNoStream, "permanent"},
		{"over max_msg_size", api(10054, "message size exceeds maximum allowed"), "permanent"},
		{"headers over 64k", api(10097, "header size exceeds maximum allowed of 64k"), "permanent"},
		{"sealed", api(10109, "invalid operation on sealed stream"), "permanent"},
		{"full", api(10077, "maximum messages exceeded"), "transient"},
		{"insufficient resources", api(10023, "insufficient resources"), "transient"},
		{"stream silent", ErrStreamSilent, "transient"},
		{"no responders, unconfirmed", jetstream.ErrNoStreamResponse, "transient"},
		{"JetStream off", ErrNoJetStream, "unavailable"},
		{"JetStream off, API", jetstream.ErrJetStreamNotEnabled, "unavailable"},
		{"JetStream off for the account", jetstream.ErrJetStreamNotEnabledForAccount, "unavailable"},
		{"closed", ErrClosed, "unavailable"},
		{"connection lost", ErrConnectionLost, "unavailable"},
		{"connect", &connectError{errors.New("nats: authorization violation")}, "unavailable"},
		{"authorization", nats.ErrAuthorization, "unavailable"},
		{"no PubAck in time", jetstream.ErrAsyncPublishTimeout, "unavailable"},
		{"connection closed", nats.ErrConnectionClosed, "unavailable"},
		{"no servers", nats.ErrNoServers, "unavailable"},
		{"reset", syscall.ECONNRESET, "unavailable"},
		{"EOF", io.EOF, "unavailable"},
		{"deadline", context.DeadlineExceeded, "unavailable"},
		{"canceled", context.Canceled, "transient"},
		{"invalid ack", jetstream.ErrInvalidJSAck, "transient"},
		{"unknown", errors.New("something else"), "transient"},
		{"already permanent", publishers.Permanent(errors.New("x")), "permanent"},
	} {
		got := classify(wrap(c.err))
		if k := publishers.ClassOf(got).String(); k != c.want {
			t.Errorf("%s: classify(%v) is %s, want %s", c.name, c.err, k, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%s: classify lost the cause %v: %v", c.name, c.err, got)
		}
	}
	if classify(nil) != nil {
		t.Error("classify(nil) != nil")
	}
}

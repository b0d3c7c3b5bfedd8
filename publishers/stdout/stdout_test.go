package stdout_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/publishers/stdout"
)

func TestPublishWritesOneJSONLinePerMessage(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := stdout.New(&buf)
	id := uuid.Must(uuid.NewV7())
	msgs := []outbox.Message{
		{ID: id, Topic: "orders", Key: []byte("k1"), Payload: []byte(`{"a":1}`), Headers: map[string]string{"h": "v"}, Attempt: 2},
		{ID: uuid.Must(uuid.NewV7()), Topic: "orders", Payload: []byte("no key")},
	}
	if err := p.Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first["id"] != id.String() || first["topic"] != "orders" || first["key"] != "k1" || first["payload"] != `{"a":1}` ||
		first["attempt"] != float64(2) || first["headers"].(map[string]any)["h"] != "v" {
		t.Errorf("first line = %v", first)
	}
	if key, present := second["key"]; !present || key != nil {
		t.Errorf("a nil key must print as null, got %v (present %v)", key, present)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	err := stdout.New(failingWriter{}).Publish(context.Background(), []outbox.Message{{ID: uuid.New(), Topic: "t"}})
	if !errors.Is(err, publishers.ErrUnavailable) || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Publish = %v, want an unavailable error naming the cause", err)
	}
}

// flakyWriter fails while broken is set.
type flakyWriter struct {
	bytes.Buffer
	broken bool
}

func (w *flakyWriter) Write(p []byte) (int, error) {
	if w.broken {
		return 0, errors.New("pipe closed")
	}
	return w.Buffer.Write(p)
}

// A write error must not stick: json.Encoder keeps its first error for
// ever, which made the sink fail every later Publish.
func TestWriteFailureDoesNotStick(t *testing.T) {
	t.Parallel()
	w := &flakyWriter{broken: true}
	p := stdout.New(w)
	msgs := []outbox.Message{{ID: uuid.New(), Topic: "t", Payload: []byte("x")}}
	if err := p.Publish(context.Background(), msgs); !errors.Is(err, publishers.ErrUnavailable) {
		t.Fatalf("Publish to a broken writer = %v, want unavailable", err)
	}
	w.broken = false
	if err := p.Publish(context.Background(), msgs); err != nil {
		t.Fatalf("Publish once the writer works again = %v", err)
	}
	if !strings.Contains(w.String(), msgs[0].ID.String()) {
		t.Errorf("the line was not written: %q", w.String())
	}
}

func TestBinaryKeyAndPayloadAreKeptInBase64(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	key, payload := []byte{0, 0xff, 'k'}, []byte{0x80, 'p', 0xfe}
	msgs := []outbox.Message{
		{ID: uuid.New(), Topic: "t", Key: key, Payload: payload},
		{ID: uuid.New(), Topic: "t", Key: []byte("text"), Payload: []byte("text")},
	}
	if err := stdout.New(&buf).Publish(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var binary, text map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &binary); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &text); err != nil {
		t.Fatal(err)
	}
	if binary["key_base64"] != base64.StdEncoding.EncodeToString(key) || binary["payload_base64"] != base64.StdEncoding.EncodeToString(payload) {
		t.Errorf("binary line = %v, want key_base64 and payload_base64 holding the exact bytes", binary)
	}
	if _, ok := text["key_base64"]; ok {
		t.Errorf("text line = %v: key_base64 only for keys that are not UTF-8", text)
	}
	if _, ok := text["payload_base64"]; ok {
		t.Errorf("text line = %v: payload_base64 only for payloads that are not UTF-8", text)
	}
}

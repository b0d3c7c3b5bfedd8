package stdout_test

import (
	"bytes"
	"context"
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

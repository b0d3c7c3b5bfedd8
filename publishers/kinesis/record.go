package kinesissink

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/cloudevents"
)

// The extensions the record's CloudEvent carries besides the event's.
const (
	// ExtKey is the key's bytes, standard base64; absent without key.
	ExtKey = "outboxkey"
	// ExtHeaders is the event's headers as a JSON object; absent without.
	ExtHeaders = "outboxheaders"
)

// ErrInvalidMessage is wrapped by the permanent error of an event Kinesis
// cannot take.
var ErrInvalidMessage = errors.New("kinesissink: invalid message")

// record is one event as PutRecords sends it.
type record struct {
	data []byte
	key  string // the partition key
}

// toRecord converts m: its CloudEvent as data, its partition key.
func toRecord(m *outbox.Message, source string) (record, error) {
	r := record{key: PartitionKey(m)}
	if m.Headers[cloudevents.HeaderContentType] == cloudevents.ContentTypeStructured {
		r.data = m.Payload // relay run's --cloudevents structured made it one
	} else {
		ce := *m
		ce.Headers = make(map[string]string, len(m.Headers)+2)
		for name, value := range m.Headers {
			ce.Headers[name] = value
		}
		if m.Key != nil {
			ce.Headers[ExtKey] = base64.StdEncoding.EncodeToString(m.Key)
		}
		if len(m.Headers) > 0 {
			b, _ := json.Marshal(m.Headers) // a map of strings always marshals
			ce.Headers[ExtHeaders] = string(b)
		}
		out, err := cloudevents.Config{Mode: cloudevents.ModeStructured, Binding: cloudevents.Kinesis, Source: source}.Convert(ce)
		if err != nil {
			return r, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
		}
		r.data = out.Payload
	}
	if size := len(r.data) + len(r.key); size > maxRecordBytes {
		return r, fmt.Errorf("%w: record of %d bytes (data and partition key), over Kinesis's %d", ErrInvalidMessage, size, maxRecordBytes)
	}
	return r, nil
}

// PartitionKey returns the partition key of m: its key when that is 1 to
// 256 characters of UTF-8, "sha256:" and the key's hex SHA-256 otherwise,
// its event id when it has no key.
func PartitionKey(m *outbox.Message) string {
	switch {
	case m.Key == nil:
		return m.ID.String()
	case len(m.Key) > 0 && utf8.Valid(m.Key) && utf8.RuneCount(m.Key) <= 256:
		return string(m.Key)
	}
	sum := sha256.Sum256(m.Key)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Event is what a record's CloudEvent carries of the outbox event.
type Event struct {
	ID      string
	Key     []byte // nil without key
	Payload []byte
	Headers map[string]string
}

// Decode reads a record's data as the sink wrote it. A JSON payload
// comes back as the envelope holds it: without white space outside its
// strings.
func Decode(data []byte) (Event, error) {
	var ce struct {
		ID         string          `json:"id"`
		Key        *string         `json:"outboxkey"`
		Headers    string          `json:"outboxheaders"`
		Data       json.RawMessage `json:"data"`
		DataBase64 *string         `json:"data_base64"`
	}
	if err := json.Unmarshal(data, &ce); err != nil {
		return Event{}, fmt.Errorf("kinesissink: not a CloudEvent: %w", err)
	}
	e := Event{ID: ce.ID, Headers: map[string]string{}, Payload: []byte(ce.Data)}
	var err error
	if ce.Key != nil {
		if e.Key, err = base64.StdEncoding.DecodeString(*ce.Key); err != nil {
			return e, fmt.Errorf("kinesissink: %s: %w", ExtKey, err)
		}
	}
	if ce.Headers != "" {
		if err := json.Unmarshal([]byte(ce.Headers), &e.Headers); err != nil {
			return e, fmt.Errorf("kinesissink: %s: %w", ExtHeaders, err)
		}
	}
	if ce.DataBase64 != nil {
		if e.Payload, err = base64.StdEncoding.DecodeString(*ce.DataBase64); err != nil {
			return e, fmt.Errorf("kinesissink: data_base64: %w", err)
		}
	}
	return e, nil
}

package cloudevents

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// specEvent is the event of the spec's examples as the relay holds it:
// the attributes the spec's examples show come from ce- headers, an
// extension from a plain header, time from created_at.
func specEvent(contentType string, payload string) outbox.Message {
	return outbox.Message{
		ID:        uuid.MustParse("0191b9a4-2d1e-7c3a-9c55-3f6a3c1e9d01"),
		Topic:     "orders.created",
		Key:       []byte("customer-7"),
		Payload:   []byte(payload),
		CreatedAt: time.Date(2018, 4, 5, 17, 31, 0, 0, time.UTC),
		Headers: map[string]string{
			"ce-type": "com.example.someevent", "ce-source": "/mycontext",
			"comexampleextension1": "value", "Content-Type": contentType, "trace-id": "t-1",
		},
	}
}

// The JSON format spec's example with JSON data (formats/json-format.md,
// 3.1): the envelope equals it, but for the id (the event id), the
// subject (the key) and comexampleothervalue (headers are strings), and
// the SDK reads it as a valid event.
func TestStructuredMatchesTheJSONFormatExample(t *testing.T) {
	m := specEvent("application/json", `{"appinfoA":"abc","appinfoB":123,"appinfoC":true}`)
	got, err := Config{Mode: ModeStructured, Binding: Kafka}.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"specversion":"1.0","type":"com.example.someevent","source":"/mycontext",
		"id":"0191b9a4-2d1e-7c3a-9c55-3f6a3c1e9d01","subject":"customer-7","time":"2018-04-05T17:31:00Z",
		"comexampleextension1":"value","datacontenttype":"application/json",
		"data":{"appinfoA":"abc","appinfoB":123,"appinfoC":true}}`
	assertJSON(t, got.Payload, want)
	if got.Headers["content-type"] != ContentTypeStructured || got.Headers["trace-id"] != "t-1" || got.Headers["comexampleextension1"] != "value" {
		t.Errorf("headers %v: want content-type %s and the plain headers", got.Headers, ContentTypeStructured)
	}
	for name := range got.Headers {
		if strings.HasPrefix(name, "ce-") || name == "Content-Type" {
			t.Errorf("header %s is still sent", name)
		}
	}
	var e cloudevents.Event
	if err := json.Unmarshal(got.Payload, &e); err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	if e.Type() != "com.example.someevent" || e.Extensions()["comexampleextension1"] != "value" || string(e.Data()) != string(m.Payload) {
		t.Errorf("the SDK reads %v", e)
	}
}

// The JSON format spec's example with binary data (3.1): data_base64,
// which the SDK decodes to the payload's bytes.
func TestStructuredBinaryDataIsBase64(t *testing.T) {
	payload := "\x00\xff thrift"
	m := specEvent("application/vnd.apache.thrift.binary", payload)
	got, err := Config{Mode: ModeStructured, Binding: NATS, Source: "/mycontext"}.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	var e cloudevents.Event
	if err := json.Unmarshal(got.Payload, &e); err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got.Payload), `"data_base64":"AP8gdGhyaWZ0"`) || string(e.Data()) != payload || e.DataContentType() != "application/vnd.apache.thrift.binary" {
		t.Errorf("envelope %s, SDK data %q", got.Payload, e.Data())
	}
	// JSON content type with a payload that is not JSON: data_base64 too.
	m = specEvent("application/json", "not json")
	if got, _ = (Config{Mode: ModeStructured, Binding: NATS}).Convert(m); !strings.Contains(string(got.Payload), `"data_base64"`) {
		t.Errorf("invalid JSON went as data: %s", got.Payload)
	}
}

// Binary mode gives the headers of the bindings' examples (Kafka binding
// 3.2.4, HTTP binding 3.1.4, AMQP binding 3.1.4), under each prefix,
// with the payload as it was.
func TestBinaryMatchesTheBindingExamples(t *testing.T) {
	m := specEvent("application/avro", "avro bytes")
	for _, c := range []struct {
		b      Binding
		prefix string
	}{{Kafka, "ce_"}, {HTTP, "ce-"}, {AMQP, "cloudEvents_"}, {NATS, "ce-"}, {RedisStreams, "ce_"}, {MQTT, ""}, {PubSub, "ce-"}} {
		got, err := Config{Mode: ModeBinary, Binding: c.b}.Convert(m)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			c.prefix + "specversion": "1.0", c.prefix + "type": "com.example.someevent", c.prefix + "source": "/mycontext",
			c.prefix + "id": m.ID.String(), c.prefix + "time": "2018-04-05T17:31:00Z", c.prefix + "subject": "customer-7",
			c.prefix + "comexampleextension1": "value", "comexampleextension1": "value",
			"content-type": "application/avro", "trace-id": "t-1",
		}
		if !maps.Equal(got.Headers, want) {
			t.Errorf("%s: headers\n%v\nwant\n%v", c.b.Name, got.Headers, want)
		}
		if string(got.Payload) != "avro bytes" || got.Topic != m.Topic || string(got.Key) != "customer-7" {
			t.Errorf("%s: the message changed: %+v", c.b.Name, got)
		}
	}
	if !reflect.DeepEqual(m, specEvent("application/avro", "avro bytes")) {
		t.Error("Convert changed its argument")
	}
}

// The defaults: type is the topic, source DefaultSource, no subject for a
// key that is not UTF-8, no datacontenttype without a content-type.
func TestDefaults(t *testing.T) {
	m := outbox.Message{ID: uuid.New(), Topic: "orders.created", Key: []byte{0xff}, Payload: []byte(`{"a":1}`)}
	got, err := Config{Mode: ModeStructured, Binding: Kafka}.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, got.Payload, `{"specversion":"1.0","id":"`+m.ID.String()+`","source":"/outboxrelay","type":"orders.created","data":{"a":1}}`)
}

// Headers that ask for what the relay sets, or name no attribute, fail
// the event; binary mode on a binding without it is refused.
func TestRefusals(t *testing.T) {
	for _, h := range []string{"ce-id", "CE-SpecVersion", "ce-datacontenttype", "ce-trace-id", "ce-time"} {
		m := outbox.Message{ID: uuid.New(), Topic: "t", Headers: map[string]string{h: "x"}}
		if _, err := (Config{Mode: ModeBinary, Binding: Kafka}).Convert(m); err == nil || !strings.Contains(err.Error(), h) {
			t.Errorf("header %s: error %v", h, err)
		}
	}
	for _, b := range []Binding{Kinesis, SQS, SNS} {
		if err := b.Check(ModeBinary); err == nil || !strings.Contains(err.Error(), "structured") {
			t.Errorf("%s: binary mode: %v", b.Name, err)
		}
		if err := b.Check(ModeStructured); err != nil {
			t.Errorf("%s: structured mode: %v", b.Name, err)
		}
	}
	if err := (Config{Mode: ModeBinary}).Check(); err == nil {
		t.Error("a sink without a binding took binary mode")
	}
	if _, err := ParseMode("json"); err == nil {
		t.Error(`ParseMode("json") passed`)
	}
}

func assertJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("envelope\n%s\nwant\n%s", got, want)
	}
}

// On HTTP the attribute headers are percent-encoded (HTTP binding
// 3.1.3.2); the plain headers and the other bindings' are not. A key that
// is not text is no subject.
func TestHTTPPercentEncoding(t *testing.T) {
	m := outbox.Message{ID: uuid.New(), Topic: "t", Key: []byte("a b"),
		Headers: map[string]string{"pct": "100%", "name": `"Zoë"`}}
	got, err := Config{Mode: ModeBinary, Binding: HTTP}.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"ce-subject": "a%20b", "ce-pct": "100%25", "ce-name": "%22Zo%C3%AB%22", "pct": "100%", "name": `"Zoë"`}
	for name, v := range want {
		if got.Headers[name] != v {
			t.Errorf("%s: %q; want %q", name, got.Headers[name], v)
		}
	}
	if got, _ := (Config{Mode: ModeBinary, Binding: Kafka}).Convert(m); got.Headers["ce_subject"] != "a b" {
		t.Errorf("Kafka: ce_subject %q", got.Headers["ce_subject"])
	}
	for _, key := range []string{" k", "k\n", "\x00", ""} {
		m.Key = []byte(key)
		if got, _ := (Config{Mode: ModeBinary, Binding: Kafka}).Convert(m); got.Headers["ce_subject"] != "" {
			t.Errorf("key %q: subject %q", key, got.Headers["ce_subject"])
		}
	}
}

// The cost of a conversion, per event of a 1 KiB JSON payload and three
// headers: go test -run - -bench Convert ./publishers/cloudevents
func BenchmarkConvert(b *testing.B) {
	m := specEvent("application/json", `{"pad":"`+strings.Repeat("x", 1000)+`"}`)
	for _, mode := range []Mode{ModeBinary, ModeStructured} {
		b.Run(string(mode), func(b *testing.B) {
			c := Config{Mode: mode, Binding: Kafka}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Convert(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A plain header named as one of the spec's attributes is no extension:
// only ce-NAME sets an attribute.
func TestPlainHeadersDoNotSetCoreAttributes(t *testing.T) {
	m := outbox.Message{ID: uuid.New(), Topic: "orders", Headers: map[string]string{"type": "x", "time": "yesterday", "subject": "s"}}
	got, err := Config{Mode: ModeBinary, Binding: Kafka}.Convert(m)
	if err != nil {
		t.Fatal(err)
	}
	if h := got.Headers; h["ce_type"] != "orders" || h["ce_time"] != "" || h["ce_subject"] != "" || h["type"] != "x" {
		t.Errorf("headers %v", h)
	}
}

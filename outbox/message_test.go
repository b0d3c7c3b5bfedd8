package outbox

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTopic(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		topic string
		ok    bool
	}{
		{"lowercase", "orders", true},
		{"uppercase", "ORDERS", true},
		{"digits", "0123456789", true},
		{"dot", "orders.created", true},
		{"underscore", "orders_created", true},
		{"dash", "orders-created", true},
		{"every allowed class", "aZ09._-", true},
		{"one byte", "a", true},
		{"three dots", "...", true},
		{"249 bytes", strings.Repeat("t", 249), true},
		{"250 bytes", strings.Repeat("t", 250), false},
		{"empty", "", false},
		{"single dot", ".", false},
		{"double dot", "..", false},
		{"space", "orders created", false},
		{"slash", "orders/created", false},
		{"colon", "orders:created", false},
		{"NUL", "orders\x00", false},
		{"non-ASCII letter", "tópico", false},
		{"non-ASCII only", "заказы", false},
		{"invalid UTF-8", "orders\xff", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateTopic(c.topic)
			if c.ok {
				if err != nil {
					t.Fatalf("ValidateTopic(%q) = %v, want nil", c.topic, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidTopic) {
				t.Fatalf("ValidateTopic(%q) = %v, want an error wrapping ErrInvalidTopic", c.topic, err)
			}
		})
	}
}

func TestValidateHeaders(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		headers map[string]string
		ok      bool
	}{
		{"nil", nil, true},
		{"empty map", map[string]string{}, true},
		{"plain", map[string]string{"content-type": "application/json"}, true},
		{"visible ASCII punctuation", map[string]string{"x!#$%&'*+-.^_`|~@[]{}()<>,;=?/\\\"": "v"}, true},
		{"empty value", map[string]string{"trace": ""}, true},
		{"UTF-8 value", map[string]string{"note": "grüße, 世界"}, true},
		{"255-byte name", map[string]string{strings.Repeat("h", 255): "v"}, true},
		{"reserved event id name", map[string]string{HeaderEventID: "x"}, false},
		{"empty name", map[string]string{"": "v"}, false},
		{"256-byte name", map[string]string{strings.Repeat("h", 256): "v"}, false},
		{"colon in name", map[string]string{"x:y": "v"}, false},
		{"space in name", map[string]string{"x y": "v"}, false},
		{"tab in name", map[string]string{"x\ty": "v"}, false},
		{"control byte in name", map[string]string{"x\x01": "v"}, false},
		{"DEL in name", map[string]string{"x\x7f": "v"}, false},
		{"non-ASCII name", map[string]string{"größe": "v"}, false},
		{"invalid UTF-8 value", map[string]string{"h": "a\xc3"}, false},
		{"NUL in value", map[string]string{"h": "a\x00b"}, false},
		{"one bad among good", map[string]string{"a": "1", "b": "2", "c:": "3"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateHeaders(c.headers)
			if c.ok {
				if err != nil {
					t.Fatalf("ValidateHeaders(%q) = %v, want nil", c.headers, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidHeader) {
				t.Fatalf("ValidateHeaders(%q) = %v, want an error wrapping ErrInvalidHeader", c.headers, err)
			}
		})
	}
}

func TestMessageValidate(t *testing.T) {
	t.Parallel()
	const maxPayload = 16
	valid := func() Message {
		return Message{Topic: "orders", Payload: []byte("{}"), Headers: map[string]string{"a": "b"}, DedupKey: "k"}
	}
	cases := []struct {
		name   string
		index  int
		modify func(*Message)
		field  string // "" means valid
		want   error
	}{
		{"valid", 0, func(*Message) {}, "", nil},
		{"payload at the limit", 0, func(m *Message) { m.Payload = make([]byte, maxPayload) }, "", nil},
		{"nil payload", 0, func(m *Message) { m.Payload = nil }, "", nil},
		{"512-byte dedup key", 0, func(m *Message) { m.DedupKey = strings.Repeat("d", 512) }, "", nil},
		{"empty topic", 3, func(m *Message) { m.Topic = "" }, "topic", ErrInvalidTopic},
		{"bad topic", 7, func(m *Message) { m.Topic = "a b" }, "topic", ErrInvalidTopic},
		{"payload over the limit", 1, func(m *Message) { m.Payload = make([]byte, maxPayload+1) }, "payload", ErrPayloadTooLarge},
		{"bad header", 2, func(m *Message) { m.Headers = map[string]string{HeaderEventID: "x"} }, "headers", ErrInvalidHeader},
		{"513-byte dedup key", 4, func(m *Message) { m.DedupKey = strings.Repeat("d", 513) }, "dedup_key", ErrInvalidDedupKey},
		{"invalid UTF-8 dedup key", 5, func(m *Message) { m.DedupKey = "\xff" }, "dedup_key", ErrInvalidDedupKey},
		{"NUL in dedup key", 6, func(m *Message) { m.DedupKey = "a\x00" }, "dedup_key", ErrInvalidDedupKey},
		{"topic checked before payload", 0, func(m *Message) { m.Topic = ""; m.Payload = make([]byte, maxPayload+1) }, "topic", ErrInvalidTopic},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			msg := valid()
			c.modify(&msg)
			err := msg.validate(c.index, maxPayload)
			if c.field == "" {
				if err != nil {
					t.Fatalf("validate = %v, want nil", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("validate = %v (%T), want a *ValidationError", err, err)
			}
			if ve.Field != c.field || ve.Index != c.index || ve.Err != c.want {
				t.Fatalf("got Field %q Index %d Err %v, want %q %d %v", ve.Field, ve.Index, ve.Err, c.field, c.index, c.want)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("errors.Is(%v, %v) = false", err, c.want)
			}
			if ve.Reason == "" || strings.HasPrefix(ve.Reason, c.want.Error()) {
				t.Fatalf("Reason %q should say what is wrong without repeating the sentinel", ve.Reason)
			}
			if msg := err.Error(); !strings.Contains(msg, c.field) || !strings.Contains(msg, ve.Reason) {
				t.Fatalf("Error() = %q, want it to name the field %q and the reason", msg, c.field)
			}
		})
	}
}

func TestTableValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		table Table
		ok    bool
	}{
		{"zero value", Table{}, true},
		{"plain", Table{Schema: "app", Name: "events"}, true},
		{"underscore start and digits", Table{Schema: "_s1", Name: "_t2"}, true},
		{"mixed case", Table{Schema: "App", Name: "Events"}, true},
		{"40-byte name", Table{Name: strings.Repeat("n", 40)}, true},
		{"41-byte name", Table{Name: strings.Repeat("n", 41)}, false},
		{"63-byte schema", Table{Schema: strings.Repeat("s", 63)}, true},
		{"64-byte schema", Table{Schema: strings.Repeat("s", 64)}, false},
		{"digit start", Table{Name: "1outbox"}, false},
		{"dash", Table{Name: "out-box"}, false},
		{"dot", Table{Schema: "a.b"}, false},
		{"space", Table{Name: "out box"}, false},
		{"quote injection", Table{Name: `outbox"; DROP TABLE users; --`}, false},
		{"schema injection", Table{Schema: `public"; DROP`, Name: "outbox"}, false},
		{"semicolon", Table{Name: "outbox;"}, false},
		{"non-ASCII", Table{Name: "événements"}, false},
		{"trailing newline", Table{Name: "outbox\n"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.table.Validate()
			if c.ok {
				if err != nil {
					t.Fatalf("Validate(%+v) = %v, want nil", c.table, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidIdentifier) {
				t.Fatalf("Validate(%+v) = %v, want an error wrapping ErrInvalidIdentifier", c.table, err)
			}
		})
	}
}

func TestTableNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		table   Table
		ident   string
		related string // Related("migrations")
		str     string
	}{
		{"defaults", Table{}, `"public"."outbox"`, `"public"."outbox_migrations"`, "public.outbox"},
		{"default schema", Table{Name: "events"}, `"public"."events"`, `"public"."events_migrations"`, "public.events"},
		{"default name", Table{Schema: "app"}, `"app"."outbox"`, `"app"."outbox_migrations"`, "app.outbox"},
		{"case is kept", Table{Schema: "App", Name: "Events"}, `"App"."Events"`, `"App"."Events_migrations"`, "App.Events"},
		// Ident does not validate, but whatever it is given stays one quoted
		// identifier: embedded quotes are doubled.
		{"quote injection", Table{Name: `outbox"; DROP TABLE users; --`},
			`"public"."outbox""; DROP TABLE users; --"`, `"public"."outbox""; DROP TABLE users; --_migrations"`,
			`public.outbox"; DROP TABLE users; --`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := c.table.Ident(); got != c.ident {
				t.Errorf("Ident() = %s, want %s", got, c.ident)
			}
			if got := c.table.Related("migrations"); got != c.related {
				t.Errorf("Related(migrations) = %s, want %s", got, c.related)
			}
			if got := c.table.String(); got != c.str {
				t.Errorf("String() = %s, want %s", got, c.str)
			}
		})
	}
}

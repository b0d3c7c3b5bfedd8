package outbox

import (
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// The validators below decide what the writer stores and what the relay
// accepts from rows inserted by other means. Each fuzz target checks a
// validator against an independent statement of its rule, that a rejection
// is the package's typed error, and that what is accepted can be stored and
// carried as the rest of the code assumes.

// storableText reports whether s can go into a PostgreSQL text column of a
// UTF8 database (last_error, for instance): valid UTF-8 without NUL bytes.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// topicRule is Kafka's topic rule, written independently of ValidateTopic.
func topicRule(topic string) bool {
	if topic == "" || len(topic) > MaxTopicLen || topic == "." || topic == ".." {
		return false
	}
	return strings.Trim(topic, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
}

func FuzzValidateTopic(f *testing.F) {
	for _, seed := range []string{
		"orders", "orders.created", "a", "A-b_c.9", ".", "..", "...", "", " ", "bad topic!",
		"orders\x00", "événements", "orders\n", strings.Repeat("t", MaxTopicLen), strings.Repeat("t", MaxTopicLen+1),
		"\xff", "topic/with/slash", "*",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		err := ValidateTopic(topic)
		if want := topicRule(topic); (err == nil) != want {
			t.Fatalf("ValidateTopic(%q) = %v; Kafka's rule says valid=%t", topic, err, want)
		}
		if err == nil {
			return
		}
		if !errors.Is(err, ErrInvalidTopic) {
			t.Fatalf("ValidateTopic(%q) = %v, which does not wrap ErrInvalidTopic", topic, err)
		}
		// The relay stores this text in last_error.
		if !storableText(err.Error()) {
			t.Fatalf("ValidateTopic(%q): error %q cannot be stored in a text column", topic, err)
		}
	})
}

// headerNameRule is the documented header-name rule: 1-255 bytes of visible
// ASCII other than ':', not the reserved event-id name.
func headerNameRule(name string) bool {
	if name == "" || len(name) > MaxHeaderNameLen || name == HeaderEventID {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < '!' || c > '~' || c == ':' {
			return false
		}
	}
	return true
}

func FuzzValidateHeaders(f *testing.F) {
	f.Add("content-type", "application/json", "x-trace", "abc")
	f.Add(HeaderEventID, "forged", "a", "b")
	f.Add("", "empty name", "a", "")
	f.Add("colon:name", "v", "ok", "v")
	f.Add("space name", "v", "tab\tname", "v")
	f.Add("nul", "a\x00b", "utf8", "\xff\xfe")
	f.Add("unicode", "日本語 ✓", "ctl", "\u2028line\u2029")
	f.Add(strings.Repeat("n", MaxHeaderNameLen), "x", strings.Repeat("n", MaxHeaderNameLen+1), "y")
	f.Add("del\x7f", "v", "high\x80", "v")
	f.Fuzz(func(t *testing.T, name1, value1, name2, value2 string) {
		h := map[string]string{name1: value1, name2: value2}
		err := ValidateHeaders(h)
		want := true
		for name, value := range h {
			if !headerNameRule(name) || !storableText(value) {
				want = false
			}
		}
		if (err == nil) != want {
			t.Fatalf("ValidateHeaders(%q) = %v; the documented rule says valid=%t", h, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidHeader) {
				t.Fatalf("ValidateHeaders(%q) = %v, which does not wrap ErrInvalidHeader", h, err)
			}
			if !storableText(err.Error()) {
				t.Fatalf("ValidateHeaders(%q): error %q cannot be stored in a text column", h, err)
			}
			return
		}
		// Accepted headers are stored as jsonb by the writer and read back
		// by the relay: the JSON must be accepted by jsonb (no \u0000) and
		// decode to exactly the same map.
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("json.Marshal(%q): %v", h, err)
		}
		if strings.Contains(string(b), `\u0000`) {
			t.Fatalf("accepted headers %q encode to %s, which jsonb rejects", h, b)
		}
		var back map[string]string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if !maps.Equal(back, h) {
			t.Fatalf("headers %q came back from JSON as %q", h, back)
		}
		if ValidateHeaders(nil) != nil || ValidateHeaders(map[string]string{}) != nil {
			t.Fatal("no headers must be valid")
		}
	})
}

func FuzzMessageValidate(f *testing.F) {
	f.Add("orders", []byte("k"), []byte("payload"), "content-type", "text/plain", "dedup-1", 0, 16)
	f.Add("bad topic", []byte(nil), []byte(""), "", "", "", 3, 0)
	f.Add("orders", []byte(nil), []byte("too large"), "h", "v", "", 1, 4)
	f.Add("orders", []byte(nil), []byte("x"), HeaderEventID, "v", "", 0, 10)
	f.Add("orders", []byte(nil), []byte("x"), "h", "v", "dedup\x00key", 0, 10)
	f.Add("orders", []byte(nil), []byte("x"), "h", "v", "\xff", 0, 10)
	f.Add("orders", []byte(nil), []byte("x"), "h", "v", strings.Repeat("d", MaxDedupKeyLen+1), 7, 10)
	f.Fuzz(func(t *testing.T, topic string, key, payload []byte, hname, hvalue, dedup string, index, maxPayload int) {
		if maxPayload < 0 {
			maxPayload = -maxPayload
		}
		msg := Message{Topic: topic, Key: key, Payload: payload, DedupKey: dedup}
		if hname != "" || hvalue != "" {
			msg.Headers = map[string]string{hname: hvalue}
		}
		err := msg.validate(index, maxPayload)

		// The checks run in a fixed order; the first failing one decides.
		wantField, wantErr := "", error(nil)
		switch {
		case ValidateTopic(topic) != nil:
			wantField, wantErr = "topic", ErrInvalidTopic
		case len(payload) > maxPayload:
			wantField, wantErr = "payload", ErrPayloadTooLarge
		case ValidateHeaders(msg.Headers) != nil:
			wantField, wantErr = "headers", ErrInvalidHeader
		case len(dedup) > MaxDedupKeyLen || !storableText(dedup):
			wantField, wantErr = "dedup_key", ErrInvalidDedupKey
		}
		if wantErr == nil {
			if err != nil {
				t.Fatalf("validate(%+v) = %v, want nil", msg, err)
			}
			return
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("validate(%+v) = %v (%T), want a *ValidationError", msg, err, err)
		}
		if ve.Field != wantField || !errors.Is(err, wantErr) || ve.Index != index {
			t.Fatalf("validate(%+v) = %+v; want field %q, sentinel %v, index %d", msg, ve, wantField, wantErr, index)
		}
		if ve.Reason == "" || strings.HasPrefix(ve.Reason, wantErr.Error()) {
			t.Fatalf("validate: reason %q is empty or repeats the sentinel", ve.Reason)
		}
		if !storableText(err.Error()) || !strings.Contains(err.Error(), ve.Field) {
			t.Fatalf("validate: error %q is not storable text naming the field %q", err, ve.Field)
		}
	})
}

// identRule is the documented identifier rule, written without a regexp.
func identRule(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// derivedSuffixes are the suffixes the migrations append to the table name
// for indexes, constraints and helper tables (migrations/*.sql).
var derivedSuffixes = []string{"migrations", "shards", "status_check", "dedup_key_idx", "pending_idx", "processing_idx", "ordered_idx", "ordered_pending_idx", "keyless_idx", "shard_ranges", "ordered_head_idx"}

func FuzzTable(f *testing.F) {
	for _, seed := range [][2]string{
		{"", ""}, {"public", "outbox"}, {"App", "Events"}, {"_s1", "_t2"}, {"1s", "t"},
		{"a.b", "t"}, {"s", "out-box"}, {"s", `outbox"; DROP TABLE users; --`}, {"s", "outbox\n"},
		{"s", "événements"}, {strings.Repeat("s", 63), strings.Repeat("n", 40)},
		{strings.Repeat("s", 64), "t"}, {"s", strings.Repeat("n", 41)}, {"s\x00", "t"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, schema, name string) {
		table := Table{Schema: schema, Name: name}
		d := table.WithDefaults()
		if d.WithDefaults() != d || d.Schema == "" || d.Name == "" {
			t.Fatalf("WithDefaults(%+v) = %+v is not a complete fixed point", table, d)
		}
		if schema != "" && d.Schema != schema || schema == "" && d.Schema != DefaultSchema ||
			name != "" && d.Name != name || name == "" && d.Name != DefaultTable {
			t.Fatalf("WithDefaults(%+v) = %+v: set fields must be kept, empty ones defaulted", table, d)
		}
		err := table.Validate()
		want := identRule(d.Schema, 63) && identRule(d.Name, maxTableNameLen)
		if (err == nil) != want {
			t.Fatalf("Validate(%+v) = %v; the documented rule says valid=%t", table, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidIdentifier) {
				t.Fatalf("Validate(%+v) = %v, which does not wrap ErrInvalidIdentifier", table, err)
			}
			if !storableText(err.Error()) {
				t.Fatalf("Validate(%+v): error %q is not printable text", table, err)
			}
			return
		}
		// An accepted table is pasted into SQL only through these: plain
		// quoted identifiers that PostgreSQL keeps whole (at most 63
		// bytes each, so none is silently truncated into another's name).
		if got, want := table.Ident(), `"`+d.Schema+`"."`+d.Name+`"`; got != want {
			t.Fatalf("Ident() = %s, want %s", got, want)
		}
		if got, want := table.Ident(), (pgx.Identifier{d.Schema, d.Name}).Sanitize(); got != want {
			t.Fatalf("Ident() = %s, pgx quotes it as %s", got, want)
		}
		for _, suffix := range derivedSuffixes {
			related := d.Name + "_" + suffix
			if len(related) > 63 {
				t.Fatalf("table %q: derived name %q is %d bytes; PostgreSQL truncates it to 63", d.Name, related, len(related))
			}
			if got, want := table.Related(suffix), `"`+d.Schema+`"."`+related+`"`; got != want {
				t.Fatalf("Related(%q) = %s, want %s", suffix, got, want)
			}
		}
		if got := table.String(); got != d.Schema+"."+d.Name {
			t.Fatalf("String() = %q", got)
		}
	})
}

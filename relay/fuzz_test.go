package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Created-at kinds of a fuzzed row, as store.Time can hold them.
const (
	createdFinite = iota
	createdNull
	createdInfinity
	createdNegInfinity
	createdKinds
)

// fuzzRow builds a claimed row from fuzz input.
func fuzzRow(id []byte, topic string, key, payload, headers []byte, attempt int, createdKind uint8, createdAt int64) store.Row {
	var x store.Row
	copy(x.ID[:], id)
	x.Topic, x.Key, x.Payload, x.Headers, x.Attempt = topic, key, payload, headers, attempt
	switch createdKind % createdKinds {
	case createdFinite:
		x.CreatedAt = store.Time{Time: time.Unix(0, createdAt).UTC(), Valid: true}
	case createdNull:
		x.CreatedAt = store.Time{}
	case createdInfinity:
		x.CreatedAt = store.Time{Inf: 1, Valid: true}
	case createdNegInfinity:
		x.CreatedAt = store.Time{Inf: -1, Valid: true}
	}
	return x
}

// FuzzDecode feeds decode rows as anyone with INSERT rights could leave
// them. decode must never panic; a rejection must carry a reason that
// last_error (a text column) can store, name its cause and wrap the outbox
// sentinel where there is one; an accepted row must satisfy what the sinks
// rely on (valid topic and headers, a finite created_at, an attempt within
// MaxAttempts) and carry the row's content unchanged.
func FuzzDecode(f *testing.F) {
	id := uuid.MustParse("01890a5d-ac96-774b-bcce-b302099a8057")
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	for _, s := range []struct {
		topic, headers string
		attempt        int
		kind           uint8
	}{
		{"orders", `{}`, 1, createdFinite},
		{"orders", `{"content-type": "application/json", "x-trace": "abc"}`, 1, createdFinite},
		{"orders", `null`, 1, createdFinite},
		{"orders", `[1, 2]`, 1, createdFinite},
		{"orders", `{"a": 1}`, 1, createdFinite},
		{"orders", `{"a": null}`, 1, createdFinite},
		{"orders", `{"a": {"b": "c"}}`, 1, createdFinite},
		{"orders", `{"outbox-event-id": "forged"}`, 1, createdFinite},
		{"orders", `{"": "empty name"}`, 1, createdFinite},
		{"orders", `{"bad name": "v"}`, 1, createdFinite},
		{"orders", `{"a:b": "v"}`, 1, createdFinite},
		{"orders", `{"a": "\u00e9\u2028"}`, 1, createdFinite},
		{"orders", `"a string"`, 1, createdFinite},
		{"orders", `{"a": "b"} trailing`, 1, createdFinite},
		{"orders", ``, 1, createdFinite},
		{"bad topic!", `{}`, 1, createdFinite},
		{"acc.p\xffA", `{}`, 1, createdFinite}, // not UTF-8 (issue 37)
		{"", `{}`, 1, createdFinite},
		{"..", `{}`, 1, createdFinite},
		{strings.Repeat("t", outbox.MaxTopicLen+1), `{}`, 1, createdFinite},
		{"orders", `{}`, 1, createdInfinity},
		{"orders", `{}`, 1, createdNegInfinity},
		{"orders", `{}`, 1, createdNull},
		{"orders", `{}`, 11, createdFinite},
		{"orders", `{}`, -3, createdFinite},
		{"orders", `{}`, 1<<31 - 1, createdFinite},
	} {
		f.Add(id[:], s.topic, []byte("key"), []byte("payload"), []byte(s.headers), s.attempt, s.kind, now, 10)
	}
	f.Add(id[:], "orders", []byte(nil), []byte{}, []byte(`{"k":"v"}`), 0, uint8(createdFinite), int64(0), 1)
	f.Add([]byte{}, "orders", []byte{0, 0xff}, []byte{0}, []byte("{\"k\":\"\xff\"}"), 1, uint8(createdFinite), int64(-1), 1)

	f.Fuzz(func(t *testing.T, id []byte, topic string, key, payload, headers []byte, attempt int, createdKind uint8, createdAt int64, maxAttempts int) {
		if maxAttempts < 1 {
			maxAttempts = 1 // Config.validate guarantees it
		}
		p := &pipeline{cfg: Config{MaxAttempts: maxAttempts}}
		x := fuzzRow(id, topic, key, payload, headers, attempt, createdKind, createdAt)
		msg, err := p.decode(x)
		if msg.ID != x.ID {
			t.Fatalf("decode returned id %s for row %s", msg.ID, x.ID)
		}
		finite := x.CreatedAt.Finite()
		if err != nil {
			checkRejection(t, x, err, maxAttempts, finite, false)
		} else {
			checkAccepted(t, x, msg, maxAttempts, finite)
		}
		// The same headers as jsonb would hand them over (one key once,
		// valid UTF-8, no NUL): now the reason must be the exact one.
		canonical, ok := jsonbForm(headers)
		if !ok {
			return
		}
		x.Headers = canonical
		if msg, err = p.decode(x); err != nil {
			checkRejection(t, x, err, maxAttempts, finite, true)
		} else {
			checkAccepted(t, x, msg, maxAttempts, finite)
		}
	})
}

// jsonbForm returns raw as PostgreSQL's jsonb could return it: ok is false
// when jsonb would not store raw (not JSON, not UTF-8, or holding a NUL),
// otherwise duplicate keys are merged (last wins) and the text normalised.
func jsonbForm(raw []byte) (canonical []byte, ok bool) {
	var v any
	if !utf8.Valid(raw) || json.Unmarshal(raw, &v) != nil {
		return nil, false
	}
	b, err := json.Marshal(v)
	if err != nil || bytes.Contains(b, []byte(`\u0000`)) {
		return nil, false
	}
	return b, true
}

// checkAccepted checks a message decode accepted from x.
func checkAccepted(t *testing.T, x store.Row, msg outbox.Message, maxAttempts int, finite bool) {
	t.Helper()
	switch {
	case x.Attempt > maxAttempts:
		t.Fatalf("accepted attempt %d > MaxAttempts %d", x.Attempt, maxAttempts)
	case !finite:
		t.Fatalf("accepted created_at %+v", x.CreatedAt)
	case outbox.ValidateTopic(msg.Topic) != nil:
		t.Fatalf("accepted invalid topic %q", msg.Topic)
	case outbox.ValidateHeaders(msg.Headers) != nil:
		t.Fatalf("accepted invalid headers %q: %v", msg.Headers, outbox.ValidateHeaders(msg.Headers))
	case msg.Topic != x.Topic || !bytes.Equal(msg.Key, x.Key) || (msg.Key == nil) != (x.Key == nil) ||
		!bytes.Equal(msg.Payload, x.Payload) || msg.Attempt != x.Attempt || !msg.CreatedAt.Equal(x.CreatedAt.Time):
		t.Fatalf("decode changed the row: %+v from %+v", msg, x)
	}
	// The headers are exactly the row's JSON object of strings: no value
	// was invented, coerced or dropped. JSON null means no headers.
	var generic any
	if err := json.Unmarshal(x.Headers, &generic); err != nil {
		t.Fatalf("accepted headers %q that are not JSON: %v", x.Headers, err)
	}
	if generic == nil {
		if len(msg.Headers) != 0 {
			t.Fatalf("headers %q (JSON null) decoded to %q", x.Headers, msg.Headers)
		}
		return
	}
	obj, ok := generic.(map[string]any)
	if !ok || len(obj) != len(msg.Headers) {
		t.Fatalf("accepted headers %q decoded to %q", x.Headers, msg.Headers)
	}
	for name, v := range obj {
		if s, ok := v.(string); !ok || msg.Headers[name] != s {
			t.Fatalf("header %q is %#v in the row but %q in the message", name, v, msg.Headers[name])
		}
	}
}

// checkRejection checks decode's error for x: which check fails first
// decides the reason. strict says x.headers is in jsonb's form, so that a
// JSON object of strings must fail on outbox.ValidateHeaders's rules.
func checkRejection(t *testing.T, x store.Row, err error, maxAttempts int, finite, strict bool) {
	t.Helper()
	text := err.Error()
	if !utf8.ValidString(text) || strings.ContainsRune(text, 0) {
		t.Fatalf("reason %q cannot be stored in last_error (text)", text)
	}
	switch {
	case x.Attempt > maxAttempts:
		if want := fmt.Sprintf("attempt %d exceeds max attempts %d", x.Attempt, maxAttempts); !strings.HasPrefix(text, want) {
			t.Fatalf("reason %q, want it to start with %q", text, want)
		}
		return
	case !strings.HasPrefix(text, "malformed row: "):
		t.Fatalf("reason %q does not start with %q", text, "malformed row: ")
	case !finite:
		if !strings.Contains(text, "created_at") {
			t.Fatalf("reason %q does not name created_at", text)
		}
	case outbox.ValidateTopic(x.Topic) != nil:
		if !errors.Is(err, outbox.ErrInvalidTopic) {
			t.Fatalf("reason %q for topic %q does not wrap outbox.ErrInvalidTopic", text, x.Topic)
		}
	case !strings.Contains(text, "header"):
		t.Fatalf("reason %q for headers %q does not name the headers", text, x.Headers)
	case strict:
		var generic any
		_ = json.Unmarshal(x.Headers, &generic)
		obj, isObject := generic.(map[string]any)
		strs := isObject
		for _, v := range obj {
			_, isString := v.(string)
			strs = strs && isString
		}
		if strs && !errors.Is(err, outbox.ErrInvalidHeader) {
			t.Fatalf("reason %q for headers %s does not wrap outbox.ErrInvalidHeader", text, x.Headers)
		}
		if !strs && !strings.Contains(text, "not a JSON object of string values") {
			t.Fatalf("reason %q for headers %s does not say they are not a JSON object of strings", text, x.Headers)
		}
	}
}

// FuzzDecodeWriterHeaders checks the round trip the relay exists for:
// headers the writer accepts and stores (as outbox.Writer encodes them)
// come out of decode unchanged.
func FuzzDecodeWriterHeaders(f *testing.F) {
	f.Add("content-type", "application/json", "x-trace", "abc")
	f.Add("a", "", "b", "\u2028\u00e9\t\"\\")
	f.Add("!", "~", "x-long", strings.Repeat("v", 1000))
	f.Add(outbox.HeaderEventID, "forged", "", "")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		h := map[string]string{}
		for _, kv := range [][2]string{{n1, v1}, {n2, v2}} {
			if kv[0] != "" {
				h[kv[0]] = kv[1]
			}
		}
		if outbox.ValidateHeaders(h) != nil {
			return // the writer refuses them
		}
		stored := []byte("{}") // what outbox.Writer stores for no headers
		if len(h) > 0 {
			var err error
			if stored, err = json.Marshal(h); err != nil {
				t.Fatal(err)
			}
		}
		p := &pipeline{cfg: Config{MaxAttempts: 10}}
		x := fuzzRow(nil, "orders", nil, []byte("p"), stored, 1, createdFinite, 0)
		msg, err := p.decode(x)
		if err != nil {
			t.Fatalf("decode rejected headers the writer stores (%s): %v", stored, err)
		}
		if !maps.Equal(msg.Headers, h) {
			t.Fatalf("headers %q came back as %q", h, msg.Headers)
		}
	})
}

// configFields are the Config fields a *ConfigError may name.
var configFields = []string{"Table", "ID", "BatchSize", "Lease", "PollInterval", "MaxAttempts", "BackoffMin", "BackoffMax",
	"PublishTimeout", "ShutdownTimeout", "OutageBackoffMin", "OutageBackoffMax",
	"Ordering.Topics", "Ordering.Shards", "Ordering.ShardBudget", "Ordering.HeadOfLine"}

// FuzzConfig feeds Config values as the command line and the environment
// can produce them (cmd/relay copies flags into these fields). A rejection
// must be a *ConfigError naming a field; an accepted config must satisfy
// what the relay relies on at run time: the replica id goes into locked_by
// (a text column), the lease feeds a ticker (Lease/3 > 0), batch sizes,
// timeouts and backoffs are positive and ordered, retry delays are never
// negative nor above BackoffMax, and ordering settings are usable.
func FuzzConfig(f *testing.F) {
	type seed struct {
		schema, name, id                                       string
		batch, maxAttempts                                     int
		lease, poll, bmin, bmax, publish, shutdown, omin, omax int64
		topics                                                 string
		shards, budget                                         int
		hol                                                    string
	}
	s := int64(time.Second)
	for _, c := range []seed{
		{},
		{"app", "events", "replica-1", 100, 10, 30 * s, s / 2, s, 300 * s, 60 * s, 10 * s, s / 10, 30 * s, "orders,*", 16, 0, "wait"},
		{"", "", "r\xffid", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "", 0, 0, ""},
		{"", "", "r\x00id", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "", 0, 0, ""},
		{"", "", strings.Repeat("r", 201), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "", 0, 0, ""},
		{"a.b", "", "", -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, "bad topic", -1, -1, "sideways"},
		{"", "", "", 10001, 1, s - 1, int64(time.Millisecond) - 1, 2 * s, s, 1, 1, 2 * s, s, "orders", 1025, 1, "park"},
		{"", "", "", 1, 1, s, int64(time.Millisecond), 1, 1, 1, 1, 1, 1, "*", 1, 1, "park"},
		{"", "", "", 10000, 1 << 31, 1<<63 - 1, 1<<63 - 1, 1<<63 - 1, 1<<63 - 1, 1<<63 - 1, 1<<63 - 1, 1<<63 - 1, 1<<63 - 1, "", 1024, 1 << 40, ""},
	} {
		f.Add(c.schema, c.name, c.id, c.batch, c.maxAttempts, c.lease, c.poll, c.bmin, c.bmax, c.publish, c.shutdown, c.omin, c.omax, c.topics, c.shards, c.budget, c.hol)
	}
	f.Fuzz(func(t *testing.T, schema, name, id string, batch, maxAttempts int, lease, poll, bmin, bmax, publish, shutdown, omin, omax int64,
		topics string, shards, budget int, hol string) {
		in := Config{
			Table: outbox.Table{Schema: schema, Name: name}, ID: id, BatchSize: batch, MaxAttempts: maxAttempts,
			Lease: time.Duration(lease), PollInterval: time.Duration(poll),
			BackoffMin: time.Duration(bmin), BackoffMax: time.Duration(bmax),
			PublishTimeout: time.Duration(publish), ShutdownTimeout: time.Duration(shutdown),
			OutageBackoffMin: time.Duration(omin), OutageBackoffMax: time.Duration(omax),
			Ordering: Ordering{Shards: shards, ShardBudget: budget, HeadOfLine: HeadOfLine(hol)},
		}
		if topics != "" {
			in.Ordering.Topics = strings.Split(topics, ",")
		}
		c := in.withDefaults()
		if again := c.withDefaults(); fmt.Sprint(again) != fmt.Sprint(c) {
			t.Fatalf("withDefaults is not idempotent:\n%+v\n%+v", c, again)
		}
		err := c.validate()
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("validate = %v (%T), want a *ConfigError", err, err)
			}
			if !slices.Contains(configFields, ce.Field) || ce.Reason == "" || !strings.Contains(err.Error(), ce.Field) {
				t.Fatalf("validate = %+v: unknown field or no reason", ce)
			}
			return
		}
		switch {
		case c.Table.Validate() != nil:
			t.Fatalf("accepted table %+v", c.Table)
		case c.ID == "" || len(c.ID) > 200 || !utf8.ValidString(c.ID) || strings.ContainsRune(c.ID, 0):
			t.Fatalf("accepted replica id %q, which locked_by (text) cannot hold", c.ID)
		case c.BatchSize < 1 || c.BatchSize > 10000 || c.MaxAttempts < 1:
			t.Fatalf("accepted BatchSize %d, MaxAttempts %d", c.BatchSize, c.MaxAttempts)
		case c.Lease/3 <= 0 || c.Lease.Milliseconds() < 1000 || c.PollInterval <= 0:
			t.Fatalf("accepted Lease %v, PollInterval %v", c.Lease, c.PollInterval)
		case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin || c.OutageBackoffMin <= 0 || c.OutageBackoffMax < c.OutageBackoffMin:
			t.Fatalf("accepted backoffs %v-%v, outage %v-%v", c.BackoffMin, c.BackoffMax, c.OutageBackoffMin, c.OutageBackoffMax)
		case c.PublishTimeout <= 0 || c.ShutdownTimeout <= 0:
			t.Fatalf("accepted PublishTimeout %v, ShutdownTimeout %v", c.PublishTimeout, c.ShutdownTimeout)
		}
		for _, topic := range c.Ordering.Topics {
			if topic != "*" && outbox.ValidateTopic(topic) != nil {
				t.Fatalf("accepted ordered topic %q", topic)
			}
		}
		if c.Ordering.enabled() && (c.Ordering.Shards < 1 || c.Ordering.Shards > Buckets || c.Ordering.ShardBudget < 1 ||
			c.Ordering.HeadOfLine != HeadOfLineWait && c.Ordering.HeadOfLine != HeadOfLinePark) {
			t.Fatalf("accepted ordering %+v", c.Ordering)
		}
		for _, attempt := range []int{1, 2, c.MaxAttempts, 64} {
			if d := retryDelay(attempt, c.BackoffMin, c.BackoffMax); d < 0 || d > c.BackoffMax {
				t.Fatalf("retryDelay(%d, %v, %v) = %v, outside [0, BackoffMax]", attempt, c.BackoffMin, c.BackoffMax, d)
			}
		}
	})
}

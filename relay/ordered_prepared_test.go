package relay

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
)

// With ordered topics, Run warns at start when the table's primary key is
// not prepared for them (`relay migrate up --ordered`), and not once it
// is; without ordered topics it does not ask.
func TestRunWarnsOfATableNotPreparedForOrderedTopics(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	const warning = "ordered topics on a table whose primary key is not prepared for them: its full pages slow ordered write-backs down; run `relay migrate up --ordered` (docs/ordering.md#the-primary-key-half-full)"
	// warnings starts a relay, stops it once it logged its start, and
	// returns its warnings about the key.
	warnings := func(ordering Ordering) []map[string]any {
		t.Helper()
		var buf syncBuffer
		r, err := New(pool, nopPublisher{}, Config{Table: table, Ordering: ordering, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		deadline := time.Now().Add(time.Minute)
		started := func() bool {
			buf.mu.Lock()
			defer buf.mu.Unlock()
			return strings.Contains(buf.b.String(), `"msg":"relay started"`)
		}
		for !started() {
			if time.Now().After(deadline) {
				t.Fatal("the relay did not start within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		return lines(t, &buf, warning)
	}
	ordered := Ordering{Topics: []string{"*"}}
	if got := warnings(ordered); len(got) != 1 || got[0]["level"] != "WARN" || got[0]["table"] != table.String() {
		t.Errorf("ordered topics on a table not prepared: %v, want one WARN naming the table", got)
	}
	if got := warnings(Ordering{}); len(got) != 0 {
		t.Errorf("no ordered topics: %v, want no warning", got)
	}
	if _, err := migrations.PrepareOrdered(t.Context(), pool, table); err != nil {
		t.Fatal(err)
	}
	if got := warnings(ordered); len(got) != 0 {
		t.Errorf("ordered topics on a prepared table: %v, want no warning", got)
	}
}

package demo

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
)

// The demo proves its promise on a small run: every committed event arrives
// intact, no rolled-back one does, and the summary says so.
func TestDemoRun(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
			t.Parallel()
			runDemo(t, ordered)
		})
	}
}

func runDemo(t *testing.T, ordered bool) {
	_, table := testdb.NewEmpty(t) // a fresh schema name, dropped at the end
	var out bytes.Buffer
	sum, err := Run(context.Background(), Config{
		DatabaseURL: testdb.URL(t), Schema: table.Schema, Topic: "demo.test",
		Events: 300, Writers: 2, Relays: 2, RollbackEvery: 3, Ordered: ordered,
		Timeout: time.Minute, Out: &out, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !sum.OK() || sum.Committed == 0 || sum.RolledBack == 0 || sum.Delivered != sum.Committed {
		t.Fatalf("summary %+v not a proof:\n%s", sum, out.String())
	}
	if got := sum.SentByRelay["demo-relay-1"] + sum.SentByRelay["demo-relay-2"]; got != sum.Committed {
		t.Errorf("relays sent %d rows in all (%v), want %d", got, sum.SentByRelay, sum.Committed)
	}
	if !strings.Contains(out.String(), "OK: every committed event arrived intact") {
		t.Errorf("summary lacks the verdict:\n%s", out.String())
	}
	if ordered != strings.Contains(out.String(), "per-key order violations   0") {
		t.Errorf("ordered=%v but the summary's order line does not match:\n%s", ordered, out.String())
	}
}

package demo

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
	"github.com/outboxrelay/outboxrelay/relay"
)

// testSink is one sink the demo runs against, from the registry, with
// its flags for topic.
type testSink struct {
	name, sink string
	args       func(topic string) []string
}

// testSinks are every sink of the registry that can be read back, on its
// flags' defaults (this machine's brokers) or on the broker the variable
// its own tests read names, and RabbitMQ again with the topic as a routing
// key on an exchange of its own, which the reader declares and deletes.
var testSinks = func() []testSink {
	args := map[string]func(string) []string{
		"nats": func(string) []string { return []string{"--nats-url", env("OUTBOX_TEST_NATS_URL", natssink.DefaultURL)} },
		"rabbitmq": func(string) []string {
			return []string{"--rabbitmq-url", env("OUTBOX_TEST_RABBITMQ_URL", rabbitmq.DefaultURL)}
		},
		"redis": func(string) []string {
			return []string{"--redis-url", "redis://" + env("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379") + "/0", "--redis-stream-prefix", "demo-test:"}
		},
	}
	var out []testSink
	for _, name := range sinks.Readables() {
		a := args[name]
		if a == nil {
			a = func(string) []string { return nil }
		}
		out = append(out, testSink{name, name, a})
	}
	return append(out, testSink{"rabbitmq-exchange", "rabbitmq", func(topic string) []string {
		return append(args["rabbitmq"](topic), "--rabbitmq-exchange", "x."+topic)
	}})
}()

// open returns the sink's reader for topic and the relays' publishers, as
// relay demo wires them.
func (s testSink) open(t *testing.T, topic string, rc relay.Config) (sinks.Reader, func(relay.Config) (publishers.Publisher, error)) {
	sk, _ := sinks.Named(s.sink)
	settings, _, err := sk.Parse(s.args(topic)...)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := settings.(sinks.Readable).Reader()
	if err != nil {
		t.Fatal(err)
	}
	if err := settings.Check(rc); err != nil {
		t.Fatal(err)
	}
	return reader, func(rc relay.Config) (publishers.Publisher, error) {
		return settings.Open(rc, slog.New(slog.DiscardHandler), io.Discard)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// The demo proves its promise on a small run against every sink: every
// committed event arrives intact, no rolled-back one does, ordered runs
// keep each key's write order, and the summary says so.
func TestDemoRun(t *testing.T) {
	t.Parallel()
	for _, s := range testSinks {
		for _, ordered := range []bool{false, true} {
			t.Run(s.name+"/"+map[bool]string{false: "unordered", true: "ordered"}[ordered], func(t *testing.T) {
				t.Parallel()
				runDemo(t, s, ordered)
			})
		}
	}
}

func runDemo(t *testing.T, s testSink, ordered bool) {
	pool, table := testdb.NewEmpty(t) // a fresh schema name, dropped at the end
	sum, out := runWith(t, s, Config{DatabaseURL: testdb.URL(t), Schema: table.Schema, Topic: sinks.UniqueTopic("demo.test"), Ordered: ordered})
	if !sum.OK() || sum.Committed == 0 || sum.RolledBack == 0 || sum.Delivered != sum.Committed {
		t.Fatalf("summary %+v not a proof:\n%s", sum, out)
	}
	if got := sum.SentByRelay["demo-relay-1"] + sum.SentByRelay["demo-relay-2"]; got != sum.Committed {
		t.Errorf("relays sent %d rows in all (%v), want %d", got, sum.SentByRelay, sum.Committed)
	}
	if !strings.Contains(out, "OK: every committed event arrived intact") {
		t.Errorf("summary lacks the verdict:\n%s", out)
	}
	if ordered != strings.Contains(out, "per-key order violations   0") {
		t.Errorf("ordered=%v but the summary's order line does not match:\n%s", ordered, out)
	}
	// The ordered demo runs on a table prepared as `relay migrate up
	// --ordered` prepares it, the unordered one on the default.
	prepared, err := migrations.OrderedPrepared(context.Background(), pool, outbox.Table{Schema: table.Schema, Name: "outbox"})
	if err != nil || prepared != ordered {
		t.Errorf("ordered=%v, table prepared for ordered delivery: %v (%v)", ordered, prepared, err)
	}
}

// runWith runs the demo of cfg on s with 200 events from two writers, a
// third of their transactions rolled back, and two relays, and returns its
// summary and output.
func runWith(t *testing.T, s testSink, cfg Config) (Summary, string) {
	t.Helper()
	var out bytes.Buffer
	cfg.Events, cfg.Writers, cfg.Relays, cfg.RollbackEvery = 200, 2, 2, 3
	cfg.Timeout, cfg.Out, cfg.Logger = time.Minute, &out, slog.New(slog.DiscardHandler)
	cfg.Sink, cfg.Publisher = s.open(t, cfg.Topic, cfg.RelayConfig(1))
	t.Cleanup(func() {
		if err := cfg.Sink.Close(); err != nil {
			t.Errorf("close %s: %v", s.name, err)
		}
	})
	sum, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	return sum, out.String()
}

package demo

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	natssink "github.com/outboxrelay/outboxrelay/publishers/nats"
	"github.com/outboxrelay/outboxrelay/publishers/rabbitmq"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
	"github.com/outboxrelay/outboxrelay/publishers/webhook"
	"github.com/outboxrelay/outboxrelay/relay"
)

// testSink is one sink the demo runs against: the demo's Sink and the real
// publisher configured to reach it, as relay demo wires them.
type testSink struct {
	name string
	// open returns the Sink for topic and the relays' publishers.
	open func(t *testing.T, topic string) (Sink, func(relay.Config) (relay.Publisher, error))
}

// The brokers of this machine, or those the variables the sinks' own
// tests read name.
var testSinks = []testSink{
	{"kafka", func(t *testing.T, topic string) (Sink, func(relay.Config) (relay.Publisher, error)) {
		k, err := NewKafka(nil, topic)
		if err != nil {
			t.Fatal(err)
		}
		return k, func(relay.Config) (relay.Publisher, error) { return kafka.New(kafka.Config{Brokers: k.Brokers()}) }
	}},
	{"nats", func(t *testing.T, _ string) (Sink, func(relay.Config) (relay.Publisher, error)) {
		cfg := natssink.Config{URLs: []string{env("OUTBOX_TEST_NATS_URL", natssink.DefaultURL)}}
		return NewNATS(NATSConfig{URLs: cfg.URLs}), func(relay.Config) (relay.Publisher, error) { return natssink.New(cfg) }
	}},
	{"rabbitmq", func(t *testing.T, _ string) (Sink, func(relay.Config) (relay.Publisher, error)) {
		cfg := rabbitmq.Config{URL: env("OUTBOX_TEST_RABBITMQ_URL", rabbitmq.DefaultURL)}
		return NewRabbitMQ(RabbitMQConfig{URL: cfg.URL}), func(relay.Config) (relay.Publisher, error) { return rabbitmq.New(cfg) }
	}},
	// The topic as a routing key on an exchange of its own, which the
	// demo declares and deletes.
	{"rabbitmq-exchange", func(t *testing.T, topic string) (Sink, func(relay.Config) (relay.Publisher, error)) {
		cfg := rabbitmq.Config{URL: env("OUTBOX_TEST_RABBITMQ_URL", rabbitmq.DefaultURL), Exchange: "x." + topic}
		return NewRabbitMQ(RabbitMQConfig{URL: cfg.URL, Exchange: cfg.Exchange}), func(relay.Config) (relay.Publisher, error) { return rabbitmq.New(cfg) }
	}},
	{"redis", func(t *testing.T, _ string) (Sink, func(relay.Config) (relay.Publisher, error)) {
		cfg := redisstream.Config{URL: "redis://" + env("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:6379") + "/0", StreamPrefix: "demo-test:"}
		return NewRedis(RedisConfig{URL: cfg.URL, StreamPrefix: cfg.StreamPrefix}), func(relay.Config) (relay.Publisher, error) { return redisstream.New(cfg) }
	}},
	{"webhook", func(t *testing.T, _ string) (Sink, func(relay.Config) (relay.Publisher, error)) {
		w, err := StartWebhook()
		if err != nil {
			t.Fatal(err)
		}
		return w, func(relay.Config) (relay.Publisher, error) { return webhook.New(webhook.Config{URL: w.URL()}) }
	}},
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
	topic := UniqueTopic("demo.test")
	sink, publisher := s.open(t, topic)
	t.Cleanup(func() {
		if err := sink.Close(); err != nil {
			t.Errorf("close %s: %v", s.name, err)
		}
	})
	var out bytes.Buffer
	sum, err := Run(context.Background(), Config{
		DatabaseURL: testdb.URL(t), Schema: table.Schema, Topic: topic, Sink: sink, Publisher: publisher,
		Events: 200, Writers: 2, Relays: 2, RollbackEvery: 3, Ordered: ordered,
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
	// The ordered demo runs on a table prepared as `relay migrate up
	// --ordered` prepares it, the unordered one on the default.
	prepared, err := migrations.OrderedPrepared(context.Background(), pool, outbox.Table{Schema: table.Schema, Name: "outbox"})
	if err != nil || prepared != ordered {
		t.Errorf("ordered=%v, table prepared for ordered delivery: %v (%v)", ordered, prepared, err)
	}
}

package demo

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/internal/testdb"
)

// With Inbox, the consumer reads every committed event twice and applies
// it once: on PostgreSQL with each sink that reads its destination again
// (the embedded Kafka broker, NATS, Redis), and on MariaDB with Kafka.
func TestDemoInbox(t *testing.T) {
	t.Parallel()
	for _, s := range testSinks {
		if !slices.Contains([]string{"kafka", "nats", "redis"}, s.name) {
			continue
		}
		t.Run(s.name+"/postgres", func(t *testing.T) {
			t.Parallel()
			pool, table := testdb.NewEmpty(t)
			sum := runInboxDemo(t, s, testdb.URL(t), table.Schema)
			var records int
			if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{table.Schema, "inbox"}.Sanitize()+
				" WHERE consumer = $1", consumerName).Scan(&records); err != nil || records != sum.Committed {
				t.Errorf("the inbox holds %d records of %s (%v), want one per committed event, %d", records, consumerName, err, sum.Committed)
			}
		})
	}
	t.Run("kafka/mariadb", func(t *testing.T) {
		t.Parallel()
		dbURL, schema := mysqlDemoURL(t)
		runInboxDemo(t, testSinks[slices.IndexFunc(testSinks, func(s testSink) bool { return s.name == "kafka" })], dbURL, schema)
	})
}

func runInboxDemo(t *testing.T, s testSink, dbURL, schema string) Summary {
	var out bytes.Buffer
	cfg := Config{
		DatabaseURL: dbURL, Schema: schema, Topic: sinks.UniqueTopic("demo.inbox"), Inbox: true,
		Events: 200, Writers: 2, Relays: 2, RollbackEvery: 3,
		Timeout: time.Minute, Out: &out, Logger: slog.New(slog.DiscardHandler),
	}
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
	// Each pass reads what the relays published: every committed event,
	// and any copy the relays sent twice.
	pass := sum.Delivered + sum.Duplicates
	want := fmt.Sprintf("inbox: delivered %d (%d duplicates), effects %d, duplicate effects 0\n", 2*pass, 2*pass-sum.Committed, sum.Committed)
	if sum.Committed == 0 || !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}
	if !strings.Contains(out.String(), "each applied once through the inbox") {
		t.Errorf("verdict does not mention the inbox:\n%s", out.String())
	}
	return sum
}

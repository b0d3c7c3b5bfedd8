package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

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
	sum, out := runWith(t, s, Config{DatabaseURL: dbURL, Schema: schema, Topic: sinks.UniqueTopic("demo.inbox"), Inbox: true})
	// Each pass reads what the relays published: every committed event,
	// and any copy the relays sent twice.
	pass := sum.Delivered + sum.Duplicates
	want := fmt.Sprintf("inbox: delivered %d (%d duplicates), effects %d, duplicate effects 0\n", 2*pass, 2*pass-sum.Committed, sum.Committed)
	if sum.Committed == 0 || !strings.Contains(out, want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
	if !strings.Contains(out, "each applied once through the inbox") {
		t.Errorf("verdict does not mention the inbox:\n%s", out)
	}
	return sum
}

package kafkago_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/kafkago"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	sink "github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// consume is the loop to copy: it fetches n records, ships each order
// through the inbox (inbox row and shipment commit in one transaction) and
// commits the offset only once Handle returned nil, duplicate or not.
// commit is r.CommitMessages, or a no-op for a consumer that dies first.
func consume(ctx context.Context, r *kafka.Reader, in *inbox.Inbox, pool *pgxpool.Pool, n int,
	commit func(context.Context, ...kafka.Message) error) (applied, duplicates int, err error) {
	for range n {
		km, err := r.FetchMessage(ctx)
		if err != nil {
			return applied, duplicates, err
		}
		m, err := kafkago.Message(km)
		if err != nil {
			return applied, duplicates, err // not an event of the relay: dead-letter it
		}
		duplicate, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO shipments (order_id) VALUES ($1)", string(m.Key))
			return err
		})
		if err != nil {
			return applied, duplicates, err // not committed: the group delivers it again
		}
		if duplicate {
			duplicates++
		} else {
			applied++
		}
		if err := commit(ctx, km); err != nil {
			return applied, duplicates, err
		}
	}
	return applied, duplicates, nil
}

// A consumer group ships each order once although Kafka delivers its event
// twice: the first consumer dies after shipping, before committing its
// offsets, and the group's next consumer reads the records again.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, schema, drop := exampleDatabase(ctx)
	defer pool.Close()
	defer drop()
	brokers, broker := startRelay(ctx, pool, schema, "1", "2", "3") // writes three orders.created events
	defer broker.Close()

	// Once per deployment: the inbox table (`relay migrate up --inbox`)
	// and the table the effects go to.
	table := outbox.Table{Schema: schema}
	if _, err := migrations.UpInbox(ctx, pool, table); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE shipments (order_id text NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Consumer: "shipping", Table: table})
	if err != nil {
		log.Fatal(err)
	}
	reader := func() *kafka.Reader { // MaxWait: Close waits out a pending fetch, 10s by default
		return kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "shipping", Topic: "orders.created",
			StartOffset: kafka.FirstOffset, MaxWait: 500 * time.Millisecond})
	}

	// The first consumer ships the three orders and dies before it
	// commits their offsets.
	r := reader()
	diesBeforeCommit := func(context.Context, ...kafka.Message) error { return nil }
	applied, duplicates, err := consume(ctx, r, in, pool, 3, diesBeforeCommit)
	if err != nil {
		log.Fatal(err)
	}
	r.Close()
	fmt.Printf("delivered: %d applied, %d duplicates\n", applied, duplicates)

	// The next consumer of the group gets the three records again.
	r = reader()
	applied, duplicates, err = consume(ctx, r, in, pool, 3, r.CommitMessages)
	if err != nil {
		log.Fatal(err)
	}
	r.Close()
	fmt.Printf("redelivered: %d applied, %d duplicates\n", applied, duplicates)

	rows, _ := pool.Query(ctx, "SELECT order_id, count(*) FROM shipments GROUP BY order_id ORDER BY order_id")
	order, n := "", 0
	if _, err := pgx.ForEachRow(rows, []any{&order, &n}, func() error {
		fmt.Printf("order %s: %d shipment\n", order, n)
		return nil
	}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// delivered: 3 applied, 0 duplicates
	// redelivered: 0 applied, 3 duplicates
	// order 1: 1 shipment
	// order 2: 1 shipment
	// order 3: 1 shipment
}

// exampleDatabase connects to the test database with a schema of the
// example's own first on the search path; drop drops it.
func exampleDatabase(ctx context.Context) (pool *pgxpool.Pool, schema string, drop func()) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "example_" + hex.EncodeToString(b[:])
	cfg, err := pgxpool.ParseConfig(cmp.Or(os.Getenv("OUTBOX_TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatal(err)
	}
	return pool, schema, func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			log.Print(err)
		}
	}
}

// startRelay starts an embedded Kafka broker with the topic
// orders.created (one partition), writes one event per order keyed by the
// order, and runs a relay until every event is published; it returns the
// broker's addresses and the broker, which the caller closes.
func startRelay(ctx context.Context, pool *pgxpool.Pool, schema string, orders ...string) ([]string, *kfakebroker.Broker) {
	broker, err := kfakebroker.Start(kfakebroker.Options{Topics: []string{"orders.created"}, Partitions: 1})
	if err != nil {
		log.Fatal(err)
	}
	table := outbox.Table{Schema: schema, Name: "outbox"}
	if _, err := migrations.Up(ctx, pool, table); err != nil {
		log.Fatal(err)
	}
	writer, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		log.Fatal(err)
	}
	for _, order := range orders {
		if _, err := writer.Write(ctx, pool, outbox.Message{Topic: "orders.created", Key: []byte(order), Payload: []byte(`{}`)}); err != nil {
			log.Fatal(err)
		}
	}
	publisher, err := sink.New(sink.Config{Brokers: broker.Addrs()})
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(pool, publisher, relay.Config{Table: table, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	for {
		var sent int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status = 'sent'").Scan(&sent); err != nil {
			log.Fatal(err)
		}
		if sent == len(orders) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polls a condition
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	publisher.Close()
	return broker.Addrs(), broker
}

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

// ship reads the next record of r and ships its order once, through the
// inbox: the record and the shipment commit in one transaction. The caller
// commits the record's offset when ship returns no error, duplicate or not.
func ship(ctx context.Context, r *kafka.Reader, in *inbox.Inbox, pool *pgxpool.Pool, shipments string) (kafka.Message, bool, error) {
	km, err := r.FetchMessage(ctx)
	if err != nil {
		return km, false, err
	}
	m, err := kafkago.Message(km)
	if err != nil {
		return km, false, err // not an event of the relay: dead-letter it
	}
	duplicate, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+shipments+" (order_id) VALUES ($1)", string(m.Key))
		return err
	})
	return km, duplicate, err
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
	shipments := schema + ".shipments"

	// Once per deployment: the inbox table (`relay migrate up --inbox`)
	// and the table the effects go to.
	table := outbox.Table{Schema: schema}
	if _, err := migrations.UpInbox(ctx, pool, table); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+shipments+" (order_id text NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Consumer: "shipping", Table: table})
	if err != nil {
		log.Fatal(err)
	}
	reader := func() *kafka.Reader {
		return kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, GroupID: "shipping", Topic: "orders.created", StartOffset: kafka.FirstOffset})
	}

	// The first consumer ships the three orders and dies before it
	// commits their offsets.
	r := reader()
	applied := 0
	for range 3 {
		_, duplicate, err := ship(ctx, r, in, pool, shipments)
		if err != nil {
			log.Fatal(err)
		}
		if !duplicate {
			applied++
		}
	}
	r.Close()
	fmt.Printf("first consumer: %d applied, then died before committing\n", applied)

	// The next consumer of the group gets the three records again.
	r = reader()
	defer r.Close()
	duplicates := 0
	for range 3 {
		km, duplicate, err := ship(ctx, r, in, pool, shipments)
		if err != nil {
			log.Fatal(err)
		}
		if duplicate {
			duplicates++
		}
		if err := r.CommitMessages(ctx, km); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("next consumer: %d duplicates, committed\n", duplicates)

	rows, err := pool.Query(ctx, "SELECT order_id, count(*) FROM "+shipments+" GROUP BY order_id ORDER BY order_id")
	if err != nil {
		log.Fatal(err)
	}
	for rows.Next() {
		var order string
		var n int
		if err := rows.Scan(&order, &n); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("order %s: %d shipment\n", order, n)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// first consumer: 3 applied, then died before committing
	// next consumer: 3 duplicates, committed
	// order 1: 1 shipment
	// order 2: 1 shipment
	// order 3: 1 shipment
}

// exampleDatabase connects to the test database and creates a schema of
// the example's own, which drop drops.
func exampleDatabase(ctx context.Context) (pool *pgxpool.Pool, schema string, drop func()) {
	var err error
	pool, err = pgxpool.New(ctx, cmp.Or(os.Getenv("OUTBOX_TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres"))
	if err != nil {
		log.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "example_" + hex.EncodeToString(b[:])
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

package relay_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// printer is a sink: a publishers.Publisher that prints each message and
// reports it on published.
type printer struct {
	published chan<- outbox.Message
}

var _ publishers.Publisher = printer{}

func (p printer) Publish(ctx context.Context, msgs []outbox.Message) error {
	for _, m := range msgs {
		fmt.Printf("publish %s: %s\n", m.Topic, m.Payload)
		select {
		case p.published <- m:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (printer) Close() error { return nil }

// exampleTable returns an outbox table in a fresh schema of the example
// database, and a function that drops the schema.
func exampleTable(ctx context.Context, pool *pgxpool.Pool) (outbox.Table, func()) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	table := outbox.Table{Schema: "example_" + hex.EncodeToString(b[:]), Name: "outbox"}
	return table, func() {
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{table.Schema}.Sanitize()+" CASCADE"); err != nil {
			log.Print(err)
		}
	}
}

func ExampleRelay_Run() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(cmp.Or(os.Getenv("OUTBOX_TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres"))
	if err != nil {
		log.Fatal(err)
	}
	// The session settings the relay's statements are planned under. An
	// application whose own queries want the server's defaults gives the
	// relay a pool of its own instead of sharing this one.
	relay.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	table, drop := exampleTable(ctx, pool)
	defer drop()

	// Once per deployment; `relay migrate up` does the same.
	if _, err := migrations.Up(ctx, pool, table); err != nil {
		log.Fatal(err)
	}

	// The application commits an event with its own transaction.
	writer, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := writer.Write(ctx, tx, outbox.Message{Topic: "orders.created", Payload: []byte(`{"id":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	// The relay publishes it. Run blocks until its context is cancelled.
	published := make(chan outbox.Message)
	r, err := relay.New(pool, printer{published: published}, relay.Config{
		Table:  table,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(runCtx) }()

	select {
	case <-published:
	case <-time.After(10 * time.Second):
		fmt.Println("nothing published")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}

	// Run returns after recording the outcome of the batch in flight.
	var status string
	if err := pool.QueryRow(ctx, "SELECT status FROM "+table.Ident()).Scan(&status); err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", status)
	// Output:
	// publish orders.created: {"id":42}
	// status: sent
}

// An Observer sees what the relay does; here it counts the events sent and
// the time spent publishing, as a metrics library would.
func ExampleObserver() {
	var sent, publishing atomic.Int64
	cfg := relay.Config{
		Observer: relay.ObserverFunc(func(e relay.Event) {
			switch e.Kind {
			case relay.EventRecorded:
				sent.Add(int64(e.Result.Sent))
			case relay.EventPublished:
				publishing.Add(int64(e.Duration))
			case relay.EventOutageStarted:
				log.Printf("sink down: %s", e.Err)
			}
		}),
	}
	_ = cfg // relay.New(pool, publisher, cfg)
	fmt.Println(sent.Load(), time.Duration(publishing.Load()))
	// Output: 0 0s
}

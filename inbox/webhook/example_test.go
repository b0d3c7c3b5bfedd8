package webhook_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/admin"
	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/webhook"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	sink "github.com/outboxrelay/outboxrelay/publishers/webhook"
	"github.com/outboxrelay/outboxrelay/relay"
)

// A receiver that ships each order once: the relay's webhook sink POSTs
// the events of the outbox to it, and the inbox records each event in the
// transaction that inserts its shipment, so that a second delivery of the
// event (a retry, a replay) changes nothing.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cmp.Or(os.Getenv("OUTBOX_TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	schema, drop := exampleSchema(ctx, pool)
	defer drop()

	// The receiver's side. Once per deployment: its inbox table (`relay
	// migrate up --inbox`) and the table its effects go to.
	inboxTable := outbox.Table{Schema: schema}
	if _, err := migrations.UpInbox(ctx, pool, inboxTable); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".shipments (order_id int NOT NULL, event_id uuid NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(inbox.Config{Consumer: "shipping", Table: inboxTable})
	if err != nil {
		log.Fatal(err)
	}
	// The secret the relay signs with (relay run --webhook-secret, or
	// OUTBOX_WEBHOOK_SECRET); list two while rotating.
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var applied, duplicates atomic.Int64
	handler, err := webhook.NewHandler(webhook.Config{Secrets: []string{secret}},
		func(ctx context.Context, m inbox.Message) (bool, error) {
			duplicate, err := in.Handle(ctx, pool, m, func(ctx context.Context, tx pgx.Tx) error {
				var order struct {
					ID int `json:"id"`
				}
				if err := json.Unmarshal(m.Payload, &order); err != nil {
					return webhook.Permanent(err) // 422: the relay marks the event failed
				}
				_, err := tx.Exec(ctx, "INSERT INTO "+schema+".shipments (order_id, event_id) VALUES ($1, $2)", order.ID, m.ID)
				return err // 500 when not nil: the relay retries
			})
			if err == nil && duplicate {
				duplicates.Add(1)
			} else if err == nil {
				applied.Add(1)
			}
			return duplicate, err
		})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(handler) // in production: http.ListenAndServe(addr, handler)
	defer srv.Close()

	// The sending side: an application writes three events, and a relay
	// with the webhook sink POSTs them to the receiver.
	outboxTable := outbox.Table{Schema: schema, Name: "outbox"}
	if _, err := migrations.Up(ctx, pool, outboxTable); err != nil {
		log.Fatal(err)
	}
	ids := writeOrders(ctx, pool, outboxTable, 1, 2, 3)
	publisher, err := sink.New(sink.Config{URL: srv.URL + "/events/{topic}", Secrets: []string{secret}})
	if err != nil {
		log.Fatal(err)
	}
	defer publisher.Close()
	r, err := relay.New(pool, publisher, relay.Config{Table: outboxTable, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- r.Run(runCtx) }()

	awaitSent(ctx, pool, outboxTable, len(ids))
	fmt.Printf("delivered: %d applied, %d duplicates\n", applied.Load(), duplicates.Load())

	// Replay the three events, as `relay replay` would: the receiver
	// answers 204 (Inbox-Duplicate: true) and ships nothing twice.
	adm, err := admin.New(pool, admin.Config{Table: outboxTable, Actor: "example"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := adm.Replay(ctx, admin.ReplayFilter{IDs: ids}, admin.ActionOptions{}); err != nil {
		log.Fatal(err)
	}
	awaitSent(ctx, pool, outboxTable, len(ids))
	fmt.Printf("replayed: %d applied, %d duplicates\n", applied.Load(), duplicates.Load())

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	rows, err := pool.Query(ctx, "SELECT order_id, count(*) FROM "+schema+".shipments GROUP BY order_id ORDER BY order_id")
	if err != nil {
		log.Fatal(err)
	}
	for rows.Next() {
		var order, n int
		if err := rows.Scan(&order, &n); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("order %d: %d shipment\n", order, n)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// delivered: 3 applied, 0 duplicates
	// replayed: 3 applied, 3 duplicates
	// order 1: 1 shipment
	// order 2: 1 shipment
	// order 3: 1 shipment
}

// writeOrders commits one orders.created event per order, as the
// application does in its own transaction, and returns their ids.
func writeOrders(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, orders ...int) []string {
	writer, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	var ids []string
	for _, order := range orders {
		res, err := writer.Write(ctx, tx, outbox.Message{Topic: "orders.created", Payload: fmt.Appendf(nil, `{"id":%d}`, order)})
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, res.ID.String())
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	return ids
}

// awaitSent waits until n rows of table are sent, or a minute has passed.
func awaitSent(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, n int) {
	deadline := time.Now().Add(time.Minute)
	for {
		var sent int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE status = 'sent'").Scan(&sent); err != nil {
			log.Fatal(err)
		}
		if sent == n {
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("%d of %d events sent after a minute", sent, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exampleSchema creates a fresh schema, so that the example leaves
// nothing behind, and returns it with a function that drops it.
func exampleSchema(ctx context.Context, pool *pgxpool.Pool) (string, func()) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "example_" + hex.EncodeToString(b[:])
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatal(err)
	}
	return schema, func() {
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			log.Print(err)
		}
	}
}

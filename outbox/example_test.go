package outbox_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log"
	"net/url"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver for database/sql
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// setup creates a schema of its own holding an orders table and a migrated
// outbox table. It returns a database URL whose search_path is that schema,
// the outbox table and a function that drops the schema.
func setup(ctx context.Context) (string, outbox.Table, func()) {
	u, err := url.Parse(cmp.Or(os.Getenv("OUTBOX_TEST_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres"))
	if err != nil {
		log.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	table := outbox.Table{Schema: "example_" + hex.EncodeToString(b[:]), Name: "outbox"}
	q := u.Query()
	q.Set("search_path", table.Schema)
	u.RawQuery = q.Encode()

	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrations.Up(ctx, conn, table); err != nil {
		log.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE orders (id bigint PRIMARY KEY, total_cents bigint NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	return u.String(), table, func() {
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{table.Schema}.Sanitize()+" CASCADE"); err != nil {
			log.Print(err)
		}
	}
}

func ExampleWriter_Write() {
	ctx := context.Background()
	databaseURL, table, cleanup := setup(ctx)
	defer cleanup()

	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	writer, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		log.Fatal(err)
	}

	// The business change and its event commit together, or not at all.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit

	if _, err := tx.Exec(ctx, "INSERT INTO orders (id, total_cents) VALUES ($1, $2)", 42, 1999); err != nil {
		log.Fatal(err)
	}
	res, err := writer.Write(ctx, tx, outbox.Message{
		Topic:   "orders.created",
		Key:     []byte("order-42"),
		Payload: []byte(`{"id":42,"total_cents":1999}`),
		Headers: map[string]string{"content-type": "application/json"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	var topic, status string
	if err := pool.QueryRow(ctx, "SELECT topic, status FROM "+table.Ident()+" WHERE id = $1", res.ID).Scan(&topic, &status); err != nil {
		log.Fatal(err)
	}
	fmt.Println("duplicate:", res.Duplicate)
	fmt.Println("stored:", topic, status)
	// Output:
	// duplicate: false
	// stored: orders.created pending
}

func ExampleFromSQL() {
	ctx := context.Background()
	databaseURL, table, cleanup := setup(ctx)
	defer cleanup()

	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	writer, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, total_cents) VALUES ($1, $2)", 7, 500); err != nil {
		log.Fatal(err)
	}
	res, err := writer.Write(ctx, outbox.FromSQL(tx), outbox.Message{
		Topic:   "orders.created",
		Payload: []byte(`{"id":7,"total_cents":500}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table.Ident()+" WHERE id = $1", res.ID).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("events committed:", n)
	// Output:
	// events committed: 1
}

func ExampleWriter_WriteBatch() {
	ctx := context.Background()
	databaseURL, table, cleanup := setup(ctx)
	defer cleanup()

	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	writer, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		log.Fatal(err)
	}

	// write commits msgs in one transaction.
	write := func(msgs ...outbox.Message) []outbox.Result {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // no-op after Commit
		results, err := writer.WriteBatch(ctx, tx, msgs)
		if err != nil {
			log.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			log.Fatal(err)
		}
		return results
	}

	// A DedupKey makes a retried request harmless: the event is written once.
	paid := outbox.Message{Topic: "orders.paid", Payload: []byte(`{"id":42}`), DedupKey: "order-42-paid"}
	first := write(paid)

	shipped := outbox.Message{Topic: "orders.shipped", Payload: []byte(`{"id":42}`), DedupKey: "order-42-shipped"}
	retried := write(paid, shipped)

	for i, res := range retried {
		fmt.Printf("message %d: duplicate=%v\n", i, res.Duplicate)
	}
	fmt.Println("duplicate reports the first id:", retried[0].ID == first[0].ID)
	// Output:
	// message 0: duplicate=true
	// message 1: duplicate=false
	// duplicate reports the first id: true
}

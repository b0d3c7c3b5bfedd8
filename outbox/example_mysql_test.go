package outbox_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log"
	"os"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver for database/sql
	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// setupMySQLExample creates a database of its own holding an orders table and a
// migrated outbox table. It returns a DSN that selects that database and a
// function that drops it.
func setupMySQLExample(ctx context.Context) (string, func()) {
	cfg, err := mariadbtest.ParseDSN(cmp.Or(os.Getenv(mariadbtest.EnvURL), mariadbtest.DefaultDSN))
	if err != nil {
		log.Fatal(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	cfg.DBName = "example_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+cfg.DBName); err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.UpMySQL(ctx, db, outbox.Table{}); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id BIGINT PRIMARY KEY, total_cents BIGINT NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	return cfg.FormatDSN(), func() {
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+cfg.DBName); err != nil {
			log.Print(err)
		}
	}
}

func ExampleFromMySQL() {
	ctx := context.Background()
	dsn, cleanup := setupMySQLExample(ctx) // e.g. "app:secret@tcp(db:3306)/shop"
	defer cleanup()

	db, err := sql.Open("mysql", dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// The business change and its event commit together, or not at all.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, total_cents) VALUES (?, ?)", 42, 1999); err != nil {
		log.Fatal(err)
	}
	// outbox.Write and WriteBatch write to `outbox` in the connection's
	// database; a Writer with WriterConfig.Table names another.
	res, err := outbox.Write(ctx, outbox.FromMySQL(tx), outbox.Message{
		Topic:    "orders.created",
		Key:      []byte("order-42"),
		Payload:  []byte(`{"id":42,"total_cents":1999}`),
		DedupKey: "order-42-created",
	})
	if err != nil {
		log.Fatal(err)
	}
	// A retried request writes nothing new and learns the first event's id.
	again, err := outbox.Write(ctx, outbox.FromMySQL(tx), outbox.Message{
		Topic:    "orders.created",
		Payload:  []byte(`{"id":42,"total_cents":1999}`),
		DedupKey: "order-42-created",
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	var topic, status string
	if err := db.QueryRowContext(ctx, "SELECT topic, status FROM outbox WHERE id = ?", res.ID[:]).Scan(&topic, &status); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored:", topic, status)
	fmt.Println("retry is a duplicate of it:", again.Duplicate && again.ID == res.ID)
	// Output:
	// stored: orders.created pending
	// retry is a duplicate of it: true
}

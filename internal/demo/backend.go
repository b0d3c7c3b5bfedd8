package demo

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// backend is the database of a demo run: PostgreSQL, or MySQL/MariaDB for
// a mysql:// DatabaseURL.
type backend interface {
	// newRelay returns a relay of the demo's table publishing to pub.
	newRelay(pub publishers.Publisher, rc relay.Config) (*relay.Relay, error)
	// writeOrder writes an order and its n events in one transaction,
	// rolled back when rollback is set, and returns what it wrote.
	writeOrder(ctx context.Context, topic string, n int, rollback bool) (map[string]written, error)
	// sentByRelay counts the sent rows by the relay that sent them.
	sentByRelay(ctx context.Context) (map[string]int, error)
	// orderViolations counts the events that arrived out of their key's
	// write order.
	orderViolations(ctx context.Context, arrived map[string][]string) (int, error)
	close()
}

// postgres is the demo on PostgreSQL.
type postgres struct {
	pool   *pgxpool.Pool
	table  outbox.Table
	orders string // the orders table, quoted
	w      *outbox.Writer
}

// openPostgres connects, recreates the demo schema with a migrated outbox
// table and the orders table, and says so on cfg.Out.
func openPostgres(ctx context.Context, cfg Config) (*postgres, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	relay.ConfigurePool(pcfg) // the demo's relays share its pool, as a user's would
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL (start it, or pass --database-url): %w", err)
	}
	table := outbox.Table{Schema: cfg.Schema, Name: "outbox"}
	if err := prepareSchema(ctx, pool, table, cfg.Ordered); err != nil {
		pool.Close()
		return nil, err
	}
	fmt.Fprintf(cfg.Out, "postgres: schema %s dropped, created and migrated to version %03d\n", cfg.Schema, migrations.Latest())
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &postgres{pool: pool, table: table, orders: pgx.Identifier{table.Schema, "orders"}.Sanitize(), w: w}, nil
}

func (p *postgres) newRelay(pub publishers.Publisher, rc relay.Config) (*relay.Relay, error) {
	return relay.New(p.pool, pub, rc)
}

func (p *postgres) writeOrder(ctx context.Context, topic string, n int, rollback bool) (map[string]written, error) {
	return writeOrder(ctx, p.pool, p.w, p.orders, topic, n, rollback)
}

func (p *postgres) sentByRelay(ctx context.Context) (map[string]int, error) {
	return sentByRelay(ctx, p.pool, p.table)
}

func (p *postgres) orderViolations(ctx context.Context, arrived map[string][]string) (int, error) {
	return orderViolations(ctx, p.pool, p.table, arrived)
}

func (p *postgres) close() { p.pool.Close() }

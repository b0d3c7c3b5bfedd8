package demo

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/inbox"
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
	// applyEffect applies m through the inbox (Config.Inbox): one row in
	// the effects table, unless m is a duplicate.
	applyEffect(ctx context.Context, m inbox.Message) (duplicate bool, err error)
	// countEffects counts the effect rows, and those beyond the first of
	// an event.
	countEffects(ctx context.Context) (effects, duplicates int, err error)
	close()
}

// postgres is the demo on PostgreSQL.
type postgres struct {
	pool    *pgxpool.Pool
	table   outbox.Table
	orders  string // the orders table, quoted
	w       *outbox.Writer
	in      *inbox.Inbox // with Config.Inbox
	effects string       // the effects table, quoted
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
	p := &postgres{pool: pool, table: table, orders: pgx.Identifier{table.Schema, "orders"}.Sanitize(), w: w,
		effects: pgx.Identifier{table.Schema, "effects"}.Sanitize()}
	if cfg.Inbox {
		if err := p.prepareInbox(ctx, cfg.Out); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return p, nil
}

// prepareInbox migrates the inbox table of the demo's schema and creates
// the effects table its consumer writes to.
func (p *postgres) prepareInbox(ctx context.Context, out io.Writer) error {
	t := outbox.Table{Schema: p.table.Schema, Name: inbox.DefaultTable}
	if _, err := migrations.UpInbox(ctx, p.pool, t); err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `CREATE TABLE `+p.effects+` (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id   uuid        NOT NULL,
    customer   text        NOT NULL,
    payload    text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return fmt.Errorf("create demo effects table: %w", err)
	}
	var err error
	if p.in, err = inbox.New(inbox.Config{Consumer: consumerName, Table: t}); err != nil {
		return err
	}
	fmt.Fprintf(out, "inbox:    %s migrated; consumer %s applies each event once into %s\n", t.Ident(), consumerName, p.effects)
	return nil
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

func (p *postgres) applyEffect(ctx context.Context, m inbox.Message) (bool, error) {
	return p.in.Handle(ctx, p.pool, m, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+p.effects+" (event_id, customer, payload) VALUES ($1, $2, $3)", m.ID, string(m.Key), string(m.Payload))
		return err
	})
}

func (p *postgres) countEffects(ctx context.Context) (effects, duplicates int, err error) {
	err = p.pool.QueryRow(ctx, "SELECT count(*), count(*) - count(DISTINCT event_id) FROM "+p.effects).Scan(&effects, &duplicates)
	if err != nil {
		return 0, 0, fmt.Errorf("count effects: %w", err)
	}
	return effects, duplicates, nil
}

func (p *postgres) close() { p.pool.Close() }

package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/go-sql-driver/mysql"
	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// mysqlDemo is the demo on MySQL 8.0.13+ or MariaDB 10.6+: Config.Schema
// names a database, dropped and created afresh, holding the outbox table
// and the orders table; the writers use outbox.FromMySQL.
type mysqlDemo struct {
	db      *sql.DB
	table   outbox.Table
	orders  string // the orders table, quoted
	w       *outbox.Writer
	in      *inbox.Inbox // with Config.Inbox
	effects string       // the effects table, quoted
}

// openMySQL connects to the server of the mysql:// URL, recreates the
// database Config.Schema with a migrated outbox table and the orders table,
// and says so on cfg.Out.
func openMySQL(ctx context.Context, cfg Config) (*mysqlDemo, error) {
	if cfg.Ordered {
		return nil, fmt.Errorf("demo: per-key ordered delivery on MySQL: %w (docs/ordering.md#mysql-and-mariadb)", relay.ErrUnsupported)
	}
	mc, err := mysqldsn.ParseURL(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	table := outbox.Table{Schema: cfg.Schema, Name: "outbox"}
	if err := table.Validate(); err != nil {
		return nil, err
	}
	if mc.DBName != "" && mc.DBName != table.Schema {
		fmt.Fprintf(cfg.Out, "mysql:    the URL's database %s is left alone: the demo drops and creates a database of its own, %s (--schema)\n", mc.DBName, table.Schema)
	}
	// The database is recreated on a connection to the server alone: the
	// URL's database may be the demo's.
	server := mc.Clone()
	server.DBName = ""
	admin, err := openSQL(server)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("cannot reach MySQL/MariaDB (start it, or pass --database-url): %w", err)
	}
	version, err := migrations.CheckMySQLServer(ctx, admin)
	if err != nil {
		return nil, err
	}
	quoted := migrations.MySQLIdent(outbox.Table{Name: table.Schema}) // `schema`
	for _, stmt := range []string{
		"DROP DATABASE IF EXISTS " + quoted,
		"CREATE DATABASE " + quoted + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("recreate the demo database %s (the user needs DROP and CREATE on it): %w", table.Schema, err)
		}
	}

	mc.DBName = table.Schema
	db, err := openSQL(mc)
	if err != nil {
		return nil, err
	}
	// Each relay's workers and background loops, and the writers.
	n := cfg.Relays*(relay.DefaultConfig().Workers+4) + cfg.Writers + 2
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	// orders and effects sit next to the outbox table: outbox_orders,
	// outbox_effects.
	d := &mysqlDemo{db: db, table: table, orders: migrations.MySQLRelated(table, "orders"), effects: migrations.MySQLRelated(table, "effects")}
	if err := d.prepare(ctx); err != nil {
		db.Close()
		return nil, err
	}
	fmt.Fprintf(cfg.Out, "mysql:    %s, database %s dropped, created and migrated to version %03d\n", version, table.Schema, migrations.LatestMySQL())
	if d.w, err = outbox.NewWriter(outbox.WriterConfig{Table: table}); err != nil {
		db.Close()
		return nil, err
	}
	if cfg.Inbox {
		if err := d.prepareInbox(ctx, cfg.Out); err != nil {
			db.Close()
			return nil, err
		}
	}
	return d, nil
}

// prepareInbox migrates the inbox table of the demo's database and
// creates the effects table its consumer writes to.
func (d *mysqlDemo) prepareInbox(ctx context.Context, out io.Writer) error {
	t := outbox.Table{Schema: d.table.Schema, Name: inbox.DefaultTable}
	if _, err := migrations.UpMySQLInbox(ctx, d.db, t); err != nil {
		return err
	}
	if _, err := d.db.ExecContext(ctx, `CREATE TABLE `+d.effects+` (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_id   BINARY(16)   NOT NULL,
    customer   VARCHAR(64)  NOT NULL,
    payload    VARCHAR(512) NOT NULL,
    applied_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB`); err != nil {
		return fmt.Errorf("create demo effects table: %w", err)
	}
	var err error
	if d.in, err = inbox.New(inbox.Config{Consumer: consumerName, Table: t, MySQL: true}); err != nil {
		return err
	}
	fmt.Fprintf(out, "inbox:    %s migrated; consumer %s applies each event once into %s\n", migrations.MySQLIdent(t), consumerName, d.effects)
	return nil
}

func openSQL(cfg *mysql.Config) (*sql.DB, error) {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	return sql.OpenDB(conn), nil
}

// prepare migrates the outbox table and creates the orders table.
func (d *mysqlDemo) prepare(ctx context.Context) error {
	if _, err := migrations.UpMySQL(ctx, d.db, d.table); err != nil {
		return err
	}
	_, err := d.db.ExecContext(ctx, `CREATE TABLE `+d.orders+` (
    id           BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    customer     VARCHAR(64) NOT NULL,
    amount_cents INT         NOT NULL,
    created_at   DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))
) ENGINE = InnoDB`)
	if err != nil {
		return fmt.Errorf("create demo orders table: %w", err)
	}
	return nil
}

func (d *mysqlDemo) newRelay(pub publishers.Publisher, rc relay.Config) (*relay.Relay, error) {
	rc.NoListen = true // no LISTEN/NOTIFY on MySQL: poll adaptively
	return relay.NewMySQL(d.db, pub, rc)
}

func (d *mysqlDemo) writeOrder(ctx context.Context, topic string, n int, rollback bool) (map[string]written, error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	customer := fmt.Sprintf("customer-%03d", rand.IntN(200))
	res, err := tx.ExecContext(ctx, "INSERT INTO "+d.orders+" (customer, amount_cents) VALUES (?, ?)", customer, 100+rand.IntN(100000))
	if err != nil {
		return nil, err
	}
	orderID, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	msgs := orderEvents(topic, customer, orderID, n)
	results, err := d.w.WriteBatch(ctx, outbox.FromMySQL(tx), msgs)
	if err != nil {
		return nil, err
	}
	got := writtenOf(results, msgs, customer, rollback)
	if rollback {
		return got, tx.Rollback()
	}
	return got, tx.Commit()
}

func (d *mysqlDemo) sentByRelay(ctx context.Context) (map[string]int, error) {
	// locked_by is "<relay id>#<claim number>" and kept on sent rows.
	rows, err := d.db.QueryContext(ctx, "SELECT SUBSTRING_INDEX(locked_by, '#', 1), COUNT(*) FROM "+migrations.MySQLIdent(d.table)+
		" WHERE status = 'sent' GROUP BY 1")
	if err != nil {
		return nil, fmt.Errorf("count sent rows: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var who sql.NullString
		var n int
		if err := rows.Scan(&who, &n); err != nil {
			return nil, err
		}
		out[who.String] = n
	}
	return out, rows.Err()
}

func (d *mysqlDemo) orderViolations(context.Context, map[string][]string) (int, error) {
	return 0, errors.New("demo: ordered delivery is not checked on MySQL")
}

func (d *mysqlDemo) applyEffect(ctx context.Context, m inbox.Message) (bool, error) {
	return d.in.HandleSQL(ctx, d.db, m, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+d.effects+" (event_id, customer, payload) VALUES (?, ?, ?)", m.ID[:], string(m.Key), string(m.Payload))
		return err
	})
}

func (d *mysqlDemo) countEffects(ctx context.Context) (effects, duplicates int, err error) {
	err = d.db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(*) - COUNT(DISTINCT event_id) FROM "+d.effects).Scan(&effects, &duplicates)
	if err != nil {
		return 0, 0, fmt.Errorf("count effects: %w", err)
	}
	return effects, duplicates, nil
}

func (d *mysqlDemo) close() { _ = d.db.Close() }

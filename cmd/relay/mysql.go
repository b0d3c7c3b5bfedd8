package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// MySQL and MariaDB.
//
// A --database-url starting mysql:// or mariadb:// selects MySQL 8.0.13+
// or MariaDB 10.6+ (docs/mysql.md#command-line); anything else is
// PostgreSQL. relay migrate, run, demo and the admin commands (status,
// failed, replay) work on both.
//
// On MySQL --schema names the database. Left unset, it is the URL's
// database, so that `relay run --database-url mysql://app@db/shop` serves
// shop.outbox.

// mysqlDocs is where the command line on MySQL is described.
const mysqlDocs = "docs/mysql.md#command-line"

// isMySQL reports whether --database-url names a MySQL or MariaDB server.
func (d *dbFlags) isMySQL() bool { return mysqldsn.IsURL(d.url) }

// mysqlConfig parses --database-url as a mysql:// URL with the relay's
// session settings (mysqldsn.ParseURL); errors are usage errors naming the
// flag, without the password.
func (d *dbFlags) mysqlConfig() (*mysql.Config, error) {
	cfg, err := mysqldsn.ParseURL(d.url)
	if err != nil {
		return nil, usageError("invalid value for --database-url (%s): %v", envName("database-url"), err)
	}
	return cfg, nil
}

// identRE is what outbox.Table accepts as a schema name.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// schemaName is --schema, or on MySQL when --schema is not set, the URL's
// database: "" (the connection's database) when the URL's database is not
// a plain identifier or the URL does not parse (check reports that).
func (d *dbFlags) schemaName() string {
	if !d.isMySQL() || d.f == nil || d.f.isSet("schema") {
		return d.schema
	}
	cfg, err := mysqldsn.ParseURL(d.url)
	if err != nil || !identRE.MatchString(cfg.DBName) {
		return ""
	}
	return cfg.DBName
}

// checkMySQL reports the problems of a MySQL URL: one that does not parse,
// or one that names no database when --schema is not set either.
func (d *dbFlags) checkMySQL() error {
	cfg, err := d.mysqlConfig()
	if err != nil {
		return err
	}
	if cfg.DBName == "" && d.f != nil && !d.f.isSet("schema") {
		return usageError("--database-url (%s) names no database and --schema (%s) is not set: on MySQL --schema is the database; add it to the URL (mysql://user@host:3306/DATABASE) or set --schema",
			envName("database-url"), envName("schema"))
	}
	return nil
}

// postgresOnly is the refusal of a command that works on PostgreSQL only.
func (d *dbFlags) postgresOnly() error {
	name := "this command"
	if d.f != nil {
		name = d.f.fs.Name()
	}
	return usageError("%s works on PostgreSQL only for now, and --database-url (%s) is a MySQL/MariaDB URL (%s)",
		name, envName("database-url"), mysqlDocs)
}

// mysqlDB opens a database/sql pool for the URL, at most max(4, CPUs,
// minConns) connections, as many kept idle, sessions named after appName
// (the program_name connection attribute); it does not connect yet.
func (d *dbFlags) mysqlDB() (*sql.DB, error) {
	cfg, err := d.mysqlConfig()
	if err != nil {
		return nil, err
	}
	if d.appName != "" && cfg.ConnectionAttributes == "" {
		// Attributes are key:value pairs separated by commas.
		cfg.ConnectionAttributes = "program_name:" + truncate(strings.NewReplacer(",", "_", ":", "_").Replace(d.appName), 256)
	}
	if d.driverLog != nil {
		cfg.Logger = d.driverLog
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, usageError("invalid value for --database-url (%s): %v", envName("database-url"), err)
	}
	db := sql.OpenDB(conn)
	n := max(4, runtime.NumCPU(), d.minConns)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return db, nil
}

// slogDriverLogger gives the driver's own messages (a connection that
// broke mid-packet, say) to the relay's logger, so that they are JSON lines
// with --log-format json rather than the driver's bare lines on stderr.
type slogDriverLogger struct{ l *slog.Logger }

func (s slogDriverLogger) Print(v ...any) {
	s.l.Warn("mysql driver", "message", strings.TrimSpace(fmt.Sprint(v...)))
}

// mysqlLabel is t for messages: database.table, or the table alone when it
// is in the connection's database.
func mysqlLabel(t outbox.Table) string {
	if t.Schema == "" {
		return t.WithDefaults().Name
	}
	return t.String()
}

// database is the connection relay run's relays share: a pgx pool on
// PostgreSQL, a database/sql pool on MySQL.
type database struct {
	// ping asks the server for an answer.
	ping func(ctx context.Context) error
	// check is the schema check of a table: migrations.Check or
	// migrations.CheckMySQL.
	check func(ctx context.Context, t outbox.Table) error
	// newRelay returns the relay of cfg: relay.New or relay.NewMySQL.
	newRelay func(pub publishers.Publisher, cfg relay.Config) (*relay.Relay, error)
	close    func()
}

// postgresDatabase is relay run's database on PostgreSQL.
func postgresDatabase(pool *pgxpool.Pool) *database {
	return &database{
		ping:  pool.Ping,
		check: func(ctx context.Context, t outbox.Table) error { return migrations.Check(ctx, pool, t) },
		newRelay: func(pub publishers.Publisher, cfg relay.Config) (*relay.Relay, error) {
			return relay.New(pool, pub, cfg)
		},
		close: pool.Close,
	}
}

// mysqlDatabase is relay run's database on MySQL or MariaDB.
func mysqlDatabase(db *sql.DB) *database {
	return &database{
		ping:  db.PingContext,
		check: func(ctx context.Context, t outbox.Table) error { return migrations.CheckMySQL(ctx, db, t) },
		newRelay: func(pub publishers.Publisher, cfg relay.Config) (*relay.Relay, error) {
			return relay.NewMySQL(db, pub, cfg)
		},
		close: func() { _ = db.Close() },
	}
}

// open returns relay run's database for the URL; it does not connect yet.
func (d *dbFlags) open(ctx context.Context) (*database, error) {
	if d.isMySQL() {
		db, err := d.mysqlDB()
		if err != nil {
			return nil, err
		}
		return mysqlDatabase(db), nil
	}
	pool, err := d.pool(ctx)
	if err != nil {
		return nil, err
	}
	return postgresDatabase(pool), nil
}

// mysqlRunProblems are the settings of relay run that MySQL cannot honour,
// each a usage error naming its flag.
func mysqlRunProblems(f *flags, cfg relay.Config) error {
	var errs problems
	if cfg.Claim == relay.ClaimLock {
		errs.add(usageError("--claim-mode lock (%s) is not supported on MySQL/MariaDB: use --claim-mode lease, the default (docs/ordering.md#mysql-and-mariadb)", envName("claim-mode")))
	}
	return errs.err()
}

// migrateMySQL runs relay migrate's subcommand sub on MySQL.
func migrateMySQL(ctx context.Context, sub string, db *sql.DB, table outbox.Table, inbox, ordered bool, stdout io.Writer) error {
	label := mysqlLabel(table)
	if inbox {
		switch sub {
		case "up":
			applied, err := migrations.UpMySQLInbox(ctx, db, table)
			printApplied(stdout, label, applied, err)
			return err
		case "down":
			m, ok, err := migrations.DownMySQLInbox(ctx, db, table)
			printReverted(stdout, label, m, ok, err)
			return err
		default:
			states, err := migrations.StatusMySQLInbox(ctx, db, table)
			if err == nil {
				printMigrationStates(stdout, label, states)
			}
			return err
		}
	}
	switch sub {
	case "up":
		applied, err := migrations.UpMySQL(ctx, db, table)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Fprintf(stdout, "%s is up to date (version %03d)\n", label, migrations.LatestMySQL())
		}
		for _, m := range applied {
			fmt.Fprintf(stdout, "applied %03d_%s to %s\n", m.Version, m.Name, label)
		}
		if ordered {
			created, err := migrations.PrepareOrderedMySQL(ctx, db, table)
			if err != nil {
				return err
			}
			if created {
				fmt.Fprintf(stdout, "prepared %s for ordered delivery: every keyed insert now numbers its key's events (docs/ordering.md#mysql-and-mariadb)\n", label)
			} else {
				fmt.Fprintf(stdout, "%s is prepared for ordered delivery\n", label)
			}
		}
	case "down":
		m, ok, err := migrations.DownMySQL(ctx, db, table)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(stdout, "%s has no applied migrations\n", label)
			return nil
		}
		fmt.Fprintf(stdout, "reverted %03d_%s of %s\n", m.Version, m.Name, label)
	case "status":
		states, err := migrations.StatusMySQL(ctx, db, table)
		if err != nil {
			return err
		}
		printMigrationStates(stdout, label, states)
	default:
		return usageError("unknown migrate subcommand %q: use up, down or status", sub)
	}
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

// dbFlags are the flags every database command shares.
type dbFlags struct {
	url, schema, table string
	// minConns raises the pool's default size (pool_max_conns in the URL
	// still wins): lock claims hold a connection per worker.
	minConns int
	// appName is the sessions' application_name, unless the URL sets one:
	// relay status finds the relays connected by it.
	appName string
	// driverLog receives go-sql-driver/mysql's own messages on MySQL (nil:
	// the driver's default, stderr).
	driverLog mysql.Logger
	// f is the flag set the flags are registered in: on MySQL an unset
	// --schema means the URL's database.
	f *flags
}

func (d *dbFlags) register(f *flags, defaultURL string) {
	d.f = f
	f.String(&d.url, "database-url", defaultURL, "PostgreSQL connection URL, e.g. postgres://user:pass@host:5432/db; "+
		"or MySQL 8.0.13+/MariaDB 10.6+: mysql://user:pass@host:3306/db?params (or mariadb://), see "+mysqlDocs)
	f.String(&d.schema, "schema", outbox.DefaultSchema, "schema of the outbox table; on MySQL/MariaDB the database, by default the URL's")
	f.String(&d.table, "table", outbox.DefaultTable, "name of the outbox table")
}

// outboxTable validates the schema and table flags.
func (d *dbFlags) outboxTable() (outbox.Table, error) {
	t := outbox.Table{Schema: d.schemaName(), Name: d.table}
	if err := (outbox.Table{Schema: t.Schema}).Validate(); err != nil {
		return t, usageError("invalid value for --schema (%s): %v", envName("schema"), err)
	}
	if err := t.Validate(); err != nil {
		return t, usageError("invalid value for --table (%s): %v", envName("table"), err)
	}
	return t, nil
}

// check reports the problems of the URL, PostgreSQL's or MySQL's, as
// usage errors naming the flag.
func (d *dbFlags) check() error {
	if d.isMySQL() {
		return d.checkMySQL()
	}
	_, err := d.poolConfig()
	return err
}

// poolConfig parses the URL; errors are usage errors naming the flag. A
// MySQL URL is refused: the caller works on PostgreSQL only.
func (d *dbFlags) poolConfig() (*pgxpool.Config, error) {
	if d.url == "" {
		return nil, usageError("--database-url (%s) is required", envName("database-url"))
	}
	if d.isMySQL() {
		return nil, d.postgresOnly()
	}
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, usageError("invalid value for --database-url (%s): %s", envName("database-url"), redactDSN(err.Error()))
	}
	relay.ConfigurePool(cfg)
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set && d.appName != "" {
		// PostgreSQL keeps 63 bytes of it.
		cfg.ConnConfig.RuntimeParams["application_name"] = truncate(d.appName, 63)
	}
	if !strings.Contains(d.url, "pool_max_conns") && cfg.MaxConns < int32(d.minConns) {
		cfg.MaxConns = int32(d.minConns)
	}
	return cfg, nil
}

// pool returns a pool for the URL (a usage error naming the flag when it
// is bad); it does not connect yet.
func (d *dbFlags) pool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := d.poolConfig()
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", redactDSN(d.url), err)
	}
	return pool, nil
}

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("relay migrate", "Usage: relay migrate up|down|status [flags]\n\n"+
		"up applies every pending migration (several replicas may run it at once; a second run is a no-op),\n"+
		"down reverts the latest one (001 down drops the outbox table and its events),\n"+
		"status lists migrations and when they ran.\n\n"+
		"Before turning ordered delivery on (relay run --ordered-topics), run up --ordered once: it builds\n"+
		"the primary key's pages half full (fillfactor 50), which ordered write-backs need and batch\n"+
		"writers pay about 5% for (docs/ordering.md#the-primary-key-half-full).", stdout, getenv)
	var db dbFlags
	db.register(f, "")
	var timeout, partitionInterval time.Duration
	f.Duration(&timeout, "timeout", time.Minute, "give up when the database does not answer within this time")
	f.Duration(&partitionInterval, "partition-interval", 0,
		"up: create the table partitioned by time, one partition per interval (whole seconds, e.g. 24h), "+
			"so that retention drops whole partitions (docs/architecture.md#partitioned-tables); "+
			"only when up creates the table")
	var ordered bool
	f.Bool(&ordered, "ordered", false,
		"up: also prepare the table for ordered delivery: its primary key's pages (each partition's, and those of "+
			"partitions created later) are built and split half full; idempotent (docs/ordering.md#the-primary-key-half-full); "+
			"on MySQL/MariaDB, required: it creates the trigger that numbers each key's events (docs/ordering.md#mysql-and-mariadb)")
	var inbox bool
	f.Bool(&inbox, "inbox", false,
		"migrate the inbox table of package inbox (docs/consumers.md) instead of the outbox table: "+
			"--table names it, inbox by default; it has its own versions table and may live in another database")
	if len(args) == 0 {
		_ = f.printHelp(stderr, "")
		return usageError("migrate needs a subcommand: up, down or status")
	}
	sub := args[0]
	if sub == "-h" || sub == "-help" || sub == "--help" {
		_ = f.printHelp(stdout, "")
		return flag.ErrHelp
	}
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	if sub != "up" && sub != "down" && sub != "status" {
		return usageError("unknown migrate subcommand %q: use up, down or status", sub)
	}
	if err := db.check(); err != nil {
		return err
	}
	table, err := db.outboxTable()
	if err != nil {
		return err
	}
	if inbox {
		switch {
		case partitionInterval != 0:
			return usageError("--partition-interval (%s) applies to the outbox table, not --inbox", envName("partition-interval"))
		case ordered:
			return usageError("--ordered (%s) applies to the outbox table, not --inbox", envName("ordered"))
		case !f.isSet("table"):
			table.Name = migrations.DefaultInboxTable
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if db.isMySQL() {
		if partitionInterval != 0 {
			return usageError("--partition-interval (%s) is not supported on MySQL/MariaDB: the table is not partitioned there (%s)", envName("partition-interval"), mysqlDocs)
		}
		db.driverLog = log.New(stderr, "relay: mysql driver: ", 0)
		sqlDB, err := db.mysqlDB()
		if err != nil {
			return err
		}
		defer sqlDB.Close()
		if err := awaitDatabase(ctx, sqlDB.PingContext, db.url, stderr); err != nil {
			return err
		}
		return migrateMySQL(ctx, sub, sqlDB, table, inbox, ordered, stdout)
	}
	pool, err := db.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := awaitDatabase(ctx, pool.Ping, db.url, stderr); err != nil {
		return err
	}

	if inbox {
		return migrateInbox(ctx, sub, pool, table, stdout)
	}
	switch sub {
	case "up":
		applied, err := migrations.UpWith(ctx, pool, table, migrations.Options{PartitionInterval: partitionInterval})
		if err != nil {
			return err
		}
		if partitionInterval > 0 && len(applied) > 0 && applied[0].Version == 1 {
			fmt.Fprintf(stdout, "created %s partitioned by %v\n", table, partitionInterval)
		}
		if len(applied) == 0 {
			fmt.Fprintf(stdout, "%s is up to date (version %03d)\n", table, migrations.Latest())
		}
		for _, m := range applied {
			fmt.Fprintf(stdout, "applied %03d_%s to %s\n", m.Version, m.Name, table)
		}
		if ordered {
			return prepareOrdered(ctx, pool, table, stdout)
		}
	case "down":
		m, ok, err := migrations.Down(ctx, pool, table)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(stdout, "%s has no applied migrations\n", table)
		} else {
			fmt.Fprintf(stdout, "reverted %03d_%s on %s\n", m.Version, m.Name, table)
		}
	case "status":
		states, err := migrations.Status(ctx, pool, table)
		if err != nil {
			return err
		}
		printMigrationStates(stdout, table.String(), states)
	}
	return nil
}

// migrateInbox runs relay migrate --inbox on PostgreSQL.
func migrateInbox(ctx context.Context, sub string, pool *pgxpool.Pool, table outbox.Table, stdout io.Writer) error {
	switch sub {
	case "up":
		applied, err := migrations.UpInbox(ctx, pool, table)
		printApplied(stdout, table.String(), applied, err)
		return err
	case "down":
		m, ok, err := migrations.DownInbox(ctx, pool, table)
		printReverted(stdout, table.String(), m, ok, err)
		return err
	default:
		states, err := migrations.StatusInbox(ctx, pool, table)
		if err == nil {
			printMigrationStates(stdout, table.String(), states)
		}
		return err
	}
}

// printApplied says what up applied, or that the table is up to date.
func printApplied(w io.Writer, table string, applied []migrations.Migration, err error) {
	if err != nil {
		return
	}
	if len(applied) == 0 {
		fmt.Fprintf(w, "%s is up to date\n", table)
	}
	for _, m := range applied {
		fmt.Fprintf(w, "applied %03d_%s to %s\n", m.Version, m.Name, table)
	}
}

// printReverted says what down reverted.
func printReverted(w io.Writer, table string, m migrations.Migration, ok bool, err error) {
	switch {
	case err != nil:
	case !ok:
		fmt.Fprintf(w, "%s has no applied migrations\n", table)
	default:
		fmt.Fprintf(w, "reverted %03d_%s of %s\n", m.Version, m.Name, table)
	}
}

// prepareOrdered runs migrations.PrepareOrdered and says what it did.
func prepareOrdered(ctx context.Context, pool *pgxpool.Pool, table outbox.Table, stdout io.Writer) error {
	altered, err := migrations.PrepareOrdered(ctx, pool, table)
	if err != nil {
		return err
	}
	if len(altered) == 0 {
		fmt.Fprintf(stdout, "%s is prepared for ordered delivery\n", table)
	}
	for _, key := range altered {
		fmt.Fprintf(stdout, "prepared %s for ordered delivery: fillfactor %d (on a key with rows, REINDEX INDEX CONCURRENTLY %s applies it to the pages it has)\n",
			key, migrations.OrderedFillfactor, key)
	}
	return nil
}

// printMigrationStates prints relay migrate status: the table, then each
// migration and when it ran.
func printMigrationStates(w io.Writer, table string, states []migrations.State) {
	fmt.Fprintf(w, "%s\n", table)
	for _, s := range states {
		when := "pending"
		if s.Applied() {
			when = "applied " + s.AppliedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  %03d_%-24s %s\n", s.Version, s.Name, when)
	}
}

// awaitDatabase pings until the database answers or ctx ends, saying on
// stderr why it waits.
func awaitDatabase(ctx context.Context, ping func(context.Context) error, url string, stderr io.Writer) error {
	b := backoff.NewExponentialBackOff()
	b.MaxElapsedTime = 0
	for {
		err := ping(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("database %s did not answer before --timeout: %w", redactDSN(url), err)
		}
		d := b.NextBackOff()
		fmt.Fprintf(stderr, "relay: database %s unreachable, retrying in %v: %v\n", redactDSN(url), d.Round(time.Millisecond), err)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// truncate cuts s to at most n bytes, at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

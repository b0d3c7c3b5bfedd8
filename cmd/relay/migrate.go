package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
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
}

func (d *dbFlags) register(f *flags, defaultURL string) {
	f.String(&d.url, "database-url", defaultURL, "PostgreSQL connection URL, e.g. postgres://user:pass@host:5432/db")
	f.String(&d.schema, "schema", outbox.DefaultSchema, "schema of the outbox table")
	f.String(&d.table, "table", outbox.DefaultTable, "name of the outbox table")
}

// outboxTable validates the schema and table flags.
func (d *dbFlags) outboxTable() (outbox.Table, error) {
	t := outbox.Table{Schema: d.schema, Name: d.table}
	if err := (outbox.Table{Schema: d.schema}).Validate(); err != nil {
		return t, usageError("invalid value for --schema (%s): %v", envName("schema"), err)
	}
	if err := t.Validate(); err != nil {
		return t, usageError("invalid value for --table (%s): %v", envName("table"), err)
	}
	return t, nil
}

// poolConfig parses the URL; errors are usage errors naming the flag.
func (d *dbFlags) poolConfig() (*pgxpool.Config, error) {
	if d.url == "" {
		return nil, usageError("--database-url (%s) is required", envName("database-url"))
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
		"status lists migrations and when they ran.", stdout, getenv)
	var db dbFlags
	db.register(f, "")
	var timeout, partitionInterval time.Duration
	f.Duration(&timeout, "timeout", time.Minute, "give up when the database does not answer within this time")
	f.Duration(&partitionInterval, "partition-interval", 0,
		"up: create the table partitioned by time, one partition per interval (whole seconds, e.g. 24h), "+
			"so that retention drops whole partitions (docs/architecture.md#partitioned-tables); "+
			"only when up creates the table")
	if len(args) == 0 {
		f.printUsage(stderr)
		return usageError("migrate needs a subcommand: up, down or status")
	}
	sub := args[0]
	if sub == "-h" || sub == "-help" || sub == "--help" {
		f.printUsage(stdout)
		return flag.ErrHelp
	}
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	table, err := db.outboxTable()
	if err != nil {
		return err
	}
	pool, err := db.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := awaitDatabase(ctx, pool, db.url, stderr); err != nil {
		return err
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
		fmt.Fprintf(stdout, "%s\n", table)
		for _, s := range states {
			when := "pending"
			if s.Applied() {
				when = "applied " + s.AppliedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(stdout, "  %03d_%-24s %s\n", s.Version, s.Name, when)
		}
	default:
		return usageError("unknown migrate subcommand %q: use up, down or status", sub)
	}
	return nil
}

// awaitDatabase pings until the database answers or ctx ends, saying on
// stderr why it waits.
func awaitDatabase(ctx context.Context, pool *pgxpool.Pool, url string, stderr io.Writer) error {
	b := backoff.NewExponentialBackOff()
	b.MaxElapsedTime = 0
	for {
		err := pool.Ping(ctx)
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

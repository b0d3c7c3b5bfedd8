package main

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// Several outbox tables, one relay run.
//
// --tables billing.outbox,orders.outbox serves each table listed; an entry
// without a schema is in --schema. An entry with *, ? or [...] is a
// pattern (path.Match) over the schema and the name, matched at start
// against the outbox tables migrated in the database: those next to which
// a <name>_migrations table exists. Each must match at least one.
//
// Each table gets a relay.Relay of its own, with its own claim loops,
// workers, listener and retention janitor (its jobs table is the table's),
// all sharing one pgx pool, sized Workers + 4 per table, and one sink (or
// router). Fairness comes from that: a table's claims never wait for
// another table's, only for a pool connection or the sink.

// tablesFlag is relay run's --tables.
type tablesFlag struct{ list string }

func (t *tablesFlag) register(f *flags) {
	f.String(&t.list, "tables", "", "serve several outbox tables at once, comma-separated: [schema.]table (schema defaults to --schema), "+
		"or a pattern with * ? [...] matched at start against the tables migrated in the database, e.g. 'svc_*.outbox'; "+
		"each table has its own claim loops, workers and retention janitor, sharing the database pool (--workers + 4 connections per table, --workers more with --ordered-topics) and the sink; "+
		"replaces --table; off when empty (one table: --schema, --table)")
}

// tableSpec is one entry of --tables: a table, or a pattern when pattern is
// set.
type tableSpec struct {
	schema, name string
	pattern      bool
}

func (s tableSpec) String() string { return s.schema + "." + s.name }

// specs parses --tables (nil when it is empty); an error names the flag and
// each bad entry. --table set together with --tables is refused.
func (t *tablesFlag) specs(f *flags, db dbFlags) ([]tableSpec, error) {
	if t.list == "" {
		return nil, nil
	}
	var (
		errs  problems
		specs []tableSpec
		seen  = map[tableSpec]bool{}
	)
	if f.isSet("table") {
		errs.add(usageError("--table (%s) and --tables (%s) set together: list every table in --tables", envName("table"), envName("tables")))
	}
	for _, item := range splitList(t.list) {
		s := tableSpec{schema: db.schemaName(), name: item}
		if schema, name, ok := strings.Cut(item, "."); ok {
			s.schema, s.name = schema, name
		}
		s.pattern = strings.ContainsAny(s.schema+s.name, "*?[")
		if s.pattern && db.isMySQL() {
			errs.add(usageError("invalid value for --tables (%s): %q: patterns are matched against PostgreSQL's catalog; on MySQL/MariaDB list each table ([database.]table)", envName("tables"), item))
			continue
		}
		var err error
		if s.pattern {
			_, err = path.Match(s.schema, "")
			if err == nil {
				_, err = path.Match(s.name, "")
			}
		} else {
			err = outbox.Table{Schema: s.schema, Name: s.name}.Validate()
		}
		switch {
		case err != nil:
			errs.add(usageError("invalid value for --tables (%s): %q: %v", envName("tables"), item, err))
		case !seen[s]:
			seen[s] = true
			specs = append(specs, s)
		}
	}
	if len(specs) == 0 && len(errs.msgs) == 0 {
		errs.add(usageError("invalid value for --tables (%s): %q names no table", envName("tables"), t.list))
	}
	return specs, errs.err()
}

// migratedTablesSQL lists the tables next to which a <name>_migrations
// table exists: the outbox tables relay migrate up created. Partitions
// are left out: a partitioned table is served through its parent.
const migratedTablesSQL = `
SELECT n.nspname, c.relname
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p')
  AND NOT c.relispartition
  AND EXISTS (
    SELECT 1
    FROM pg_catalog.pg_class m
    WHERE m.relnamespace = c.relnamespace
      AND m.relname = c.relname || '_migrations'
  )
ORDER BY n.nspname, c.relname`

// resolveTables returns the tables specs name, in the order given, each
// pattern's matches sorted by schema and name, each table once. Patterns
// are matched on one connection opened for it with db's settings; a
// pattern that matches nothing is an error.
func resolveTables(ctx context.Context, db dbFlags, specs []tableSpec) ([]outbox.Table, error) {
	var migrated []outbox.Table
	for _, s := range specs {
		if s.pattern {
			var err error
			if migrated, err = lookUpMigrated(ctx, db); err != nil {
				return nil, err
			}
			break
		}
	}
	var (
		out  []outbox.Table
		seen = map[outbox.Table]bool{}
		add  = func(t outbox.Table) {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
		unmatched []string
	)
	for _, s := range specs {
		if !s.pattern {
			add(outbox.Table{Schema: s.schema, Name: s.name})
			continue
		}
		n := 0
		for _, t := range migrated {
			schemaOK, _ := path.Match(s.schema, t.Schema)
			nameOK, _ := path.Match(s.name, t.Name)
			if schemaOK && nameOK {
				add(t)
				n++
			}
		}
		if n == 0 {
			unmatched = append(unmatched, s.String())
		}
	}
	if len(unmatched) > 0 {
		return nil, fmt.Errorf("--tables: %s matched no migrated outbox table (a table with a <name>_migrations table next to it); migrate a table with relay migrate up --schema S --table T",
			strings.Join(unmatched, ", "))
	}
	return out, nil
}

// lookUpMigrated lists the migrated outbox tables of the database whose
// names are valid identifiers.
func lookUpMigrated(ctx context.Context, db dbFlags) ([]outbox.Table, error) {
	cfg, err := db.poolConfig()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, fmt.Errorf("--tables: list the migrated tables of %s: %w", redactDSN(db.url), err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, migratedTablesSQL)
	if err != nil {
		return nil, fmt.Errorf("--tables: list the migrated tables: %w", err)
	}
	var out []outbox.Table
	for rows.Next() {
		var t outbox.Table
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			return nil, fmt.Errorf("--tables: list the migrated tables: %w", err)
		}
		if t.Validate() == nil {
			out = append(out, t)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("--tables: list the migrated tables: %w", err)
	}
	return out, nil
}

// tableRelay is the relay of one table.
type tableRelay struct {
	table outbox.Table
	r     *relay.Relay
}

// fleet is relay run's relays, one per table, sharing a pool and a sink.
type fleet struct {
	relays []tableRelay
	// command returns the relay migrate up command line for a table.
	command func(outbox.Table) string
}

// newFleet creates a relay per table, each with cfg and its own table,
// and the Observer observer returns for the table when observer is not
// nil.
func newFleet(newRelay func(publishers.Publisher, relay.Config) (*relay.Relay, error), pub publishers.Publisher, cfg relay.Config, tables []outbox.Table, observer func(outbox.Table) relay.Observer, command func(outbox.Table) string) (*fleet, error) {
	fl := &fleet{command: command}
	for _, t := range tables {
		c := cfg
		c.Table = t
		if observer != nil {
			c.Observer = observer(t)
		}
		r, err := newRelay(pub, c)
		if err != nil {
			return nil, err
		}
		fl.relays = append(fl.relays, tableRelay{table: t, r: r})
	}
	return fl, nil
}

// names lists the tables, comma-separated.
func (fl *fleet) names() string {
	var s []string
	for _, tr := range fl.relays {
		s = append(s, tr.table.String())
	}
	return strings.Join(s, ",")
}

// check verifies every table's schema before any relay starts, so that
// every table behind is reported at once, each with its command. Errors
// other than a schema out of date (the database not answering) are left to
// the relays, which wait for the database.
func (fl *fleet) check(ctx context.Context, check func(context.Context, outbox.Table) error) error {
	var errs []error
	for _, tr := range fl.relays {
		err := check(ctx, tr.table)
		switch {
		case errors.Is(err, migrations.ErrNotMigrated):
			errs = append(errs, &notMigratedError{err: err, command: fl.command(tr.table)})
		case errors.Is(err, migrations.ErrSchemaTooNew):
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// run runs every relay until ctx ends or one of them fails; a failure
// stops the others. Once ctx has ended it waits at most limit more (as
// runBounded). The error names each table whose relay failed.
func (fl *fleet) run(ctx context.Context, limit time.Duration) error {
	return runBounded(ctx, func(ctx context.Context) error {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		for _, tr := range fl.relays {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := tr.r.Run(ctx)
				if err == nil {
					return
				}
				if errors.Is(err, migrations.ErrNotMigrated) {
					err = &notMigratedError{err: err, command: fl.command(tr.table)}
				} else if len(fl.relays) > 1 {
					err = fmt.Errorf("table %s: %w", tr.table, err)
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				stop()
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	}, limit)
}

package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"

	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/relay"
)

func runRelay(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("relay run", "Usage: relay run [flags]\n\n"+
		"Claims committed outbox rows and publishes them until SIGTERM or SIGINT, then stops claiming,\n"+
		"lets the batch in flight finish (or releases it) and exits 0. Run as many replicas as you like.\n"+
		"--tables serves several outbox tables from one process, each with its own claim loops.\n\n"+
		"Tracing is off unless the standard OpenTelemetry variables ask for it: OTEL_EXPORTER_OTLP_ENDPOINT\n"+
		"or OTEL_TRACES_EXPORTER=otlp (OTLP over HTTP), with OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER and the\n"+
		"others of docs/operations.md.\n\n"+
		"The garbage collector runs at GOGC=400 unless the environment sets GOGC (docs/operations.md).", stdout, getenv)
	f.sections = runSections()
	var o runOptions
	o.register(f)
	var tf tablesFlag
	tf.register(f)
	// Every configuration problem is reported at once, before anything is
	// logged or connected.
	var errs problems
	if err := f.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) || f.stopped {
			return err // --help, or a command line that could not be read
		}
		errs.add(err)
	}
	if len(f.args()) > 0 {
		errs.add(usageError("unexpected arguments %q", f.args()))
	}
	cfg, err := o.config()
	errs.add(err)
	specs, err := tf.specs(f, o.db)
	errs.add(err)
	traceEnv, err := tracingFromEnv(getenv)
	errs.add(err)
	if err := errs.err(); err != nil {
		return err
	}

	logger, err := newLogger(stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	cfg.relay.Logger = logger
	var obs *observeFile
	if o.observeFile != "" {
		if obs, err = openObserveFile(o.observeFile, logger); err != nil {
			return usageError("invalid value for --observe-file (%s): %v", envName("observe-file"), err)
		}
		defer obs.close() // deferred first: runs after the pool and the sink are closed
		cfg.relay.Observer = obs
	}
	if o.metrics, err = o.mf.newRelayMetrics(); err != nil {
		return err
	}
	cfg.relay.Observer = o.metrics.observer(cfg.relay.Observer)

	if o.tracing, err = traceEnv.start(ctx, logger); err != nil {
		return err
	}
	defer o.tracing.awaitShutdown(logger) // the export started below overlaps closing the sink and the pool
	o.warnInsecureTLS(logger)
	pub, err := o.openSink(cfg.relay, logger, stdout)
	if err != nil {
		return err
	}
	defer closeWithin(logger, "sink", func() { _ = pub.Close() })

	tables := []outbox.Table{cfg.table}
	if specs != nil {
		if tables, err = resolveTables(ctx, o.db, specs); err != nil {
			return err
		}
	}
	// Each worker's batch, each ordered loop's (with ordered topics), the
	// listener, the janitor and the look below the claim floor of each
	// table may each hold a connection at once.
	perTable := cfg.relay.Workers + 4
	if len(cfg.relay.Ordering.Topics) > 0 {
		perTable += cfg.relay.Ordering.Loops
	}
	o.db.minConns = len(tables) * perTable
	// The sessions are named after the replica, so that relay status lists
	// the relays connected.
	if cfg.relay.ID == "" {
		cfg.relay.ID = relay.NewReplicaID()
	}
	o.db.appName = relaySessionName(cfg.relay.ID)
	o.db.driverLog = slogDriverLogger{logger}
	db, err := o.db.open(ctx)
	if err != nil {
		return err
	}
	defer closeWithin(logger, "database pool", db.close)
	defer o.tracing.startShutdown() // Run has returned: every span has ended
	// With several tables, each relay's observer names its table in the
	// observe file.
	var observer func(outbox.Table) relay.Observer
	if obs != nil && len(tables) > 1 {
		observer = func(t outbox.Table) relay.Observer { return o.metrics.observer(obs.forTable(t.String())) }
	}
	fl, err := newFleet(db.newRelay, pub, cfg.relay, tables, observer, func(t outbox.Table) string { return migrateUpCommandFor(f, o.db, t) })
	if err != nil {
		return asUsage(err)
	}
	if obs != nil {
		obs.relayID = fl.relays[0].r.ID() // before Run, which reports every event
	}
	if o.pprofAddr != "" {
		bound, stop, err := servePprof(o.pprofAddr)
		if err != nil {
			return usageError("invalid value for --pprof-addr (%s): %v", envName("pprof-addr"), err)
		}
		defer stop()
		logger.Info("serving profiles", "address", bound.String(), "path", "/debug/pprof/")
		if !isLoopbackAddr(o.pprofAddr) {
			logger.Warn("profiles served beyond this host (--pprof-allow-remote): whoever reaches the address can read them", "address", bound.String())
		}
	}
	stopMetrics, err := o.serveMetrics(logger, fl, db)
	if err != nil {
		return err
	}
	defer stopMetrics()
	logger.Info("connecting", "database", redactDSN(o.db.url), "table", fl.names(), "sink", o.sinkName())
	if specs != nil {
		// Every table behind is reported at once, before any relay starts.
		if err := fl.check(ctx, db.check); err != nil {
			return err
		}
	}
	return fl.run(ctx, cfg.relay.ShutdownTimeout+runGrace)
}

// notMigratedError is migrations.ErrNotMigrated with the exact command that
// migrates the table relay run was given.
type notMigratedError struct {
	err     error
	command string
}

func (e *notMigratedError) Error() string {
	msg := e.err.Error()
	if strings.Contains(msg, "`relay migrate up`") {
		return strings.Replace(msg, "`relay migrate up`", "`"+e.command+"`", 1)
	}
	return msg + "; run `" + e.command + "`"
}

func (e *notMigratedError) Unwrap() error { return e.err }

// migrateUpCommand is the relay migrate up command line for the database
// and table of f: --schema and --table when they are not the defaults, and
// the database URL as the variable it came from, or as given with its
// password masked.
func migrateUpCommand(f *flags, db dbFlags) string {
	return migrateUpCommandFor(f, db, outbox.Table{Schema: db.schema, Name: db.table})
}

// migrateUpCommandFor is migrateUpCommand for table t of the database of
// db.
func migrateUpCommandFor(f *flags, db dbFlags, t outbox.Table) string {
	cmd := "relay migrate up --database-url "
	if f.fromEnv("database-url") {
		cmd += `"$` + envName("database-url") + `"`
	} else {
		cmd += shellQuote(redactDSN(db.url))
	}
	// Names are validated identifiers: nothing to quote. On MySQL an
	// unset --schema is the URL's database.
	defaultSchema := outbox.DefaultSchema
	if db.isMySQL() {
		defaultSchema = ""
		if cfg, err := mysqldsn.ParseURL(db.url); err == nil {
			defaultSchema = cfg.DBName
		}
	}
	if t.Schema != defaultSchema && t.Schema != "" {
		cmd += " --schema " + t.Schema
	}
	if t.Name != outbox.DefaultTable {
		cmd += " --table " + t.Name
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

package main

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/demo"
	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay"
)

// inboxSinks are the sinks whose destination relay demo --inbox can read
// again from its beginning; RabbitMQ's queue and the webhook receiver
// hand each message over once.
var inboxSinks = []string{"kafka", "nats", "redis"}

// defaultDemoURL is the local PostgreSQL of a development machine.
const defaultDemoURL = "postgres://postgres@127.0.0.1:5432/postgres"

// demoDefaults are the defaults of sink flags in relay demo where they
// differ from relay run's, or where relay run has none: the services of a
// development machine. A flag that is not registered is skipped.
var demoDefaults = []struct{ name, value, usage string }{
	{"kafka-brokers", "", "; empty starts an embedded Kafka-protocol broker"},
	{"nats-url", "nats://127.0.0.1:4222", ""},
	{"rabbitmq-url", "amqp://guest:guest@127.0.0.1:5672/", ""},
	{"redis-url", "redis://127.0.0.1:6379/0", ""},
	{"webhook-url", "", "; relay demo sets it to a receiver of its own on 127.0.0.1 and refuses another"},
}

func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("relay demo", "Usage: relay demo [flags]\n\n"+
		"Migrates an outbox table in its own schema (--schema, dropped and recreated; on MySQL/MariaDB, a\n"+
		"database of its own, with --database-url mysql://user:pass@host:3306/, whose database, if it names\n"+
		"one, is left alone), prepares the destination of\n"+
		"its topic on the sink --sink names (Kafka: an embedded Kafka-protocol broker unless --kafka-brokers\n"+
		"is given; NATS: a JetStream stream; RabbitMQ: a queue where the sink routes the topic; Redis: a\n"+
		"stream; webhook: a receiver on 127.0.0.1), writes orders and their events in real transactions\n"+
		"(some rolled back), runs several relays publishing with that sink and its --<sink>-* flags, as\n"+
		"relay run does, reads the destination back and checks that every committed event arrived intact\n"+
		"and no rolled-back one did. With --inbox, a consumer then applies each event through an inbox, reads\n"+
		"the topic again from its beginning and checks that no event had two effects. Exits 0 when it did.", stdout, getenv)
	var (
		url, schema, topic, sinkName string
		logLevel, logFormat          string
		sinkFlags                    sinkFlagSet
		cfg                          demo.Config
	)
	f.String(&url, "database-url", defaultDemoURL, "PostgreSQL connection URL; or mysql://user:pass@host:3306/ (or mariadb://) for MySQL 8.0.13+/MariaDB 10.6+, see "+mysqlDocs)
	f.String(&schema, "schema", "outbox_demo", "schema the demo creates afresh (it is dropped first); on MySQL/MariaDB the database, dropped and created afresh")
	sinkFlags.register(f)
	f.String(&sinkName, "sink", defaultSink, "where the relays publish: "+orList(sinks.Readables(), ", or ")+"; the sink's flags are those of relay run")
	for _, d := range demoDefaults {
		setDefault(f, d.name, d.value, d.usage)
	}
	f.String(&topic, "topic", "demo.orders", "topic to publish to; with a sink other than kafka, the demo adds a suffix unique to the run (demo.orders.r1a2b3c4d), so that each run has a destination of its own")
	f.Int(&cfg.Events, "events", 3000, "events to write, committed or rolled back")
	f.Int(&cfg.Writers, "writers", 4, "concurrent writer goroutines")
	f.Int(&cfg.Relays, "relays", 3, "relay replicas")
	f.Int(&cfg.RollbackEvery, "rollback-every", 5, "roll back one transaction in this many")
	f.Bool(&cfg.Ordered, "ordered", false, "deliver each customer's events in write order (per-key ordering) and check it")
	f.Bool(&cfg.Inbox, "inbox", false, "then apply each event through an inbox (package inbox, table inbox in the demo's schema) while reading the topic back, read it all again as a consumer that lost its offsets would, and check that each event had one effect; with --sink "+orList(inboxSinks, " or "))
	f.Duration(&cfg.Timeout, "timeout", 2*time.Minute, "give up after this long")
	f.String(&logFormat, "log-format", "text", "relay log format: text or json")
	f.String(&logLevel, "log-level", "warn", "relay log level: debug, info, warn or error")
	if err := f.parse(args); err != nil {
		return err
	}
	readable, known := sinkFlags[sinkName].(sinks.Readable)
	switch {
	case cfg.Events < 1:
		return usageError("--events (%s) must be at least 1", envName("events"))
	case cfg.Writers < 1:
		return usageError("--writers (%s) must be at least 1", envName("writers"))
	case cfg.Relays < 1:
		return usageError("--relays (%s) must be at least 1", envName("relays"))
	case cfg.RollbackEvery < 2:
		return usageError("--rollback-every (%s) must be at least 2", envName("rollback-every"))
	case !known:
		return usageError("invalid value for --sink (%s): %q; relay demo reads back %s", envName("sink"), sinkName, orList(sinks.Readables(), " or "))
	case cfg.Inbox && !slices.Contains(inboxSinks, sinkName):
		return usageError("--inbox (%s) reads the topic twice from its beginning: --sink %s, not %s, whose reader takes what it reads", envName("inbox"), orList(inboxSinks, " or "), sinkName)
	}
	logger, err := newLogger(stderr, logFormat, logLevel)
	if err != nil {
		return err
	}
	d := dbFlags{url: url, schema: schema, table: "outbox"}
	if _, err := d.outboxTable(); err != nil {
		return err
	}
	if d.isMySQL() {
		if _, err := d.mysqlConfig(); err != nil {
			return err
		}
		if cfg.Ordered {
			return usageError("--ordered (%s) is not supported on MySQL/MariaDB: per-key ordered delivery needs PostgreSQL (docs/ordering.md#mysql-and-mariadb)", envName("ordered"))
		}
	}
	if sinkName != "kafka" {
		topic = sinks.UniqueTopic(topic)
	}
	cfg.DatabaseURL, cfg.Schema, cfg.Topic = url, schema, topic
	cfg.Out, cfg.Logger = stdout, logger

	sink, err := readable.Reader()
	if err != nil {
		return usageError("%v", err) // a --<sink>-* flag the demo cannot read back from
	}
	defer func() {
		if err := sink.Close(); err != nil {
			logger.Warn("demo sink not cleaned up", "sink", sinkName, "error", err)
		}
	}()
	if err := sinkFlags.check(sinkName, cfg.RelayConfig(1)); err != nil {
		return err
	}
	cfg.Sink = sink
	cfg.Publisher = func(rc relay.Config) (publishers.Publisher, error) {
		return sinkFlags.open(sinkName, rc, logger.With("relay", rc.ID), stdout)
	}
	_, err = demo.Run(ctx, cfg)
	return err
}

// setFlag gives flag name the value s, as the command line would; it was
// checked when registered.
func setFlag(f *flags, name, s string) {
	if fl := f.fs.Lookup(name); fl != nil {
		if err := fl.Value.(*value).set(s); err != nil {
			panic(errors.New("relay demo: " + name + ": " + err.Error())) // a value of the demo's own
		}
	}
}

// setDefault makes s the default of flag name, before parse, and adds
// usage to its help; a flag that is not registered is skipped.
func setDefault(f *flags, name, s, usage string) {
	if fl := f.fs.Lookup(name); fl != nil {
		setFlag(f, name, s)
		fl.DefValue = s
		fl.Usage += usage
	}
}

package main

import (
	"context"
	"io"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/demo"
)

// defaultDemoURL is the local PostgreSQL of a development machine.
const defaultDemoURL = "postgres://postgres@127.0.0.1:5432/postgres"

func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("relay demo", "Usage: relay demo [flags]\n\n"+
		"Migrates an outbox table in its own schema (dropped and recreated), starts an embedded\n"+
		"Kafka-protocol broker unless --kafka-brokers is given, writes orders and their events in real\n"+
		"transactions (some rolled back), runs several relays, consumes the topic back and checks that\n"+
		"every committed event arrived intact and no rolled-back one did. Exits 0 when it did.", stdout, getenv)
	var (
		url, schema, brokers, topic string
		logLevel, logFormat         string
		cfg                         demo.Config
	)
	f.String(&url, "database-url", defaultDemoURL, "PostgreSQL connection URL")
	f.String(&schema, "schema", "outbox_demo", "schema the demo creates afresh (it is dropped first)")
	f.String(&brokers, "kafka-brokers", "", "Kafka brokers to use instead of the embedded broker")
	f.String(&topic, "topic", "demo.orders", "topic to publish to")
	f.Int(&cfg.Events, "events", 3000, "events to write, committed or rolled back")
	f.Int(&cfg.Writers, "writers", 4, "concurrent writer goroutines")
	f.Int(&cfg.Relays, "relays", 3, "relay replicas")
	f.Int(&cfg.RollbackEvery, "rollback-every", 5, "roll back one transaction in this many")
	f.Bool(&cfg.Ordered, "ordered", false, "deliver each customer's events in write order (per-key ordering) and check it")
	f.Duration(&cfg.Timeout, "timeout", 2*time.Minute, "give up after this long")
	f.String(&logFormat, "log-format", "text", "relay log format: text or json")
	f.String(&logLevel, "log-level", "warn", "relay log level: debug, info, warn or error")
	if err := f.parse(args); err != nil {
		return err
	}
	switch {
	case cfg.Events < 1:
		return usageError("--events (%s) must be at least 1", envName("events"))
	case cfg.Writers < 1:
		return usageError("--writers (%s) must be at least 1", envName("writers"))
	case cfg.Relays < 1:
		return usageError("--relays (%s) must be at least 1", envName("relays"))
	case cfg.RollbackEvery < 2:
		return usageError("--rollback-every (%s) must be at least 2", envName("rollback-every"))
	}
	logger, err := newLogger(stderr, logFormat, logLevel)
	if err != nil {
		return err
	}
	d := dbFlags{url: url, schema: schema, table: "outbox"}
	if _, err := d.outboxTable(); err != nil {
		return err
	}
	cfg.DatabaseURL, cfg.Schema, cfg.Brokers, cfg.Topic = url, schema, splitList(brokers), topic
	cfg.Out, cfg.Logger = stdout, logger
	_, err = demo.Run(ctx, cfg)
	return err
}

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/route"
	"github.com/outboxrelay/outboxrelay/relay"
)

// runOptions are the settings of relay run.
type runOptions struct {
	f                   *flags // for isSet, once parsed
	db                  dbFlags
	sinks               sinkFlagSet
	routes              routeFlags
	ce                  ceFlags
	rules               []route.Rule // parsed by config
	rf                  relayFlags
	sink                string
	logFormat, logLevel string
	pprofAddr           string
	pprofRemote         bool // --pprof-allow-remote
	observeFile         string
	tracing             *relayTracing // from the OTEL_* variables; nil when off (tracing.go)
	mf                  metricsFlags  // --metrics-addr and friends (metrics.go)
	metrics             *relayMetrics // nil when --metrics-addr is empty
}

func (o *runOptions) register(f *flags) {
	o.f = f
	o.db.register(f, "")
	o.sinks.register(f)
	o.routes.register(f)
	o.ce.register(f)
	o.rf.register(f)
	f.String(&o.pprofAddr, "pprof-addr", "", "serve Go's profiles (net/http/pprof, without /debug/pprof/cmdline) on this loopback address, e.g. 127.0.0.1:6060; off when empty")
	f.Bool(&o.pprofRemote, "pprof-allow-remote", false, "let --pprof-addr be an address that is not loopback, e.g. :6060: whoever reaches it can read the profiles and make the relay spend CPU on them")
	o.mf.register(f)
	f.String(&o.observeFile, "observe-file", "", "append every event the relay reports to its observer (claims, publishes, recorded outcomes, outages, janitor runs, ...) to this file as JSON lines, after a \"started\" line at the first claim; the form is documented in cmd/relay/observe.go; off when empty")
	f.String(&o.sink, "sink", defaultSink, sinkHelp())
	f.String(&o.logFormat, "log-format", "text", "log format: text or json")
	f.String(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// runConfig is what relay run needs once its flags are known to be good.
type runConfig struct {
	table outbox.Table
	relay relay.Config
}

// config checks every setting of relay run and returns them, or a usage
// error listing every problem, each naming its flag and variable. It
// neither logs nor connects.
func (o *runOptions) config() (runConfig, error) {
	var (
		c    runConfig
		errs problems
		err  error
	)
	errs.add(o.db.check())
	c.table, err = o.db.outboxTable()
	errs.add(err)
	c.relay, err = o.rf.config()
	errs.add(err)
	if c.table.Validate() == nil {
		c.relay.Table = c.table
	}
	if o.db.isMySQL() {
		// MySQL has no LISTEN/NOTIFY: the relay polls, adaptively (--poll-min
		// after a claim that found rows, doubling up to --poll-interval).
		c.relay.NoListen = true
	}
	for _, ce := range relayProblems(c.relay) {
		errs.add(asUsage(ce))
	}
	if o.db.isMySQL() {
		errs.add(mysqlRunProblems(o.f, c.relay))
	}
	o.rules, err = o.routes.parse()
	errs.add(err)
	switch _, known := sinks.Named(o.sink); {
	case len(o.rules) > 0:
		if o.f != nil && o.f.isSet("sink") {
			errs.add(usageError("--sink (%s) and --route set together: with routes each rule names its sink; drop --sink", envName("sink")))
		}
		errs.add(o.checkRoutes(o.rules, c.relay))
	case known:
		errs.add(o.sinks.check(o.sink, c.relay))
	default:
		errs.add(usageError("invalid value for --sink (%s): %q; use %s", envName("sink"), o.sink, sinkNames()))
	}
	errs.add(o.ce.check(o.sink, o.rules))
	_, err = newLogger(io.Discard, o.logFormat, o.logLevel)
	errs.add(err)
	errs.add(o.mf.check())
	if o.pprofAddr != "" {
		if _, _, err := net.SplitHostPort(o.pprofAddr); err != nil {
			errs.add(usageError("invalid value for --pprof-addr (%s): %q is not host:port, e.g. 127.0.0.1:6060", envName("pprof-addr"), o.pprofAddr))
		} else if !o.pprofRemote && !isLoopbackAddr(o.pprofAddr) {
			errs.add(usageError("invalid value for --pprof-addr (%s): %s, or set --pprof-allow-remote (%s)", envName("pprof-addr"), notLoopback(o.pprofAddr), envName("pprof-allow-remote")))
		}
	}
	return c, errs.err()
}

// relayFlags hold the relay.Config knobs.
type relayFlags struct {
	id                                string
	batchSize, batchMin, batchBytes   int
	maxEventBytes                     int
	maxAttempts, workers              int
	lease, pollInterval, pollMin      time.Duration
	backoffMin, backoffMax            time.Duration
	publishTimeout, shutdownTimeout   time.Duration
	outageMin, outageMax              time.Duration
	probeInterval                     time.Duration
	orderedTopics, headOfLine         string
	claimMode                         string
	shards, orderedLoops, shardBudget int
	listen                            bool
	retention, janitorInterval        time.Duration
	janitorBatch                      int
	keepSent, janitorVacuum           bool
}

// register adds the flags; their defaults are relay.DefaultConfig's (those
// it derives at start are zero here, and the help says what they become).
func (r *relayFlags) register(f *flags) {
	d := relay.DefaultConfig()
	f.String(&r.id, "relay-id", "", "replica id; each claim writes <id>#<n> to locked_by (default host-pid-random)")
	f.Int(&r.batchSize, "batch-size", d.BatchSize, "most rows one claim takes: claims start at --batch-min, double while they come back full and halve when they come back less than a quarter full")
	f.Int(&r.batchMin, "batch-min", 0, fmt.Sprintf("smallest claim of the adaptive batch size; equal to --batch-size fixes the size (default %d, or --batch-size when smaller)", relay.DefaultBatchMin))
	f.Int(&r.batchBytes, "batch-bytes", d.BatchBytes, "a claim stops at the row at which its rows' payloads, keys and headers reach this many bytes (at least one row); the adaptive batch size grows no further")
	f.Int(&r.maxEventBytes, "max-event-bytes", d.MaxEventBytes, "largest event (payload, key and headers) the relay reads; a larger row fails without being read")
	f.Int(&r.workers, "workers", d.Workers, "unordered batches in flight at once (each claims, publishes and records its own), so the database works while a batch is published (ordered topics: --ordered-loops)")
	f.Duration(&r.lease, "lease", d.Lease, "how long a claim is valid without renewal")
	f.String(&r.claimMode, "claim-mode", string(d.Claim), "how an unordered claim holds its rows while they are published: lease (written to the row, two row versions per event) or lock (a row lock in a transaction kept open until the outcome is recorded, one row version per event); see docs/architecture.md#claim-modes")
	f.Duration(&r.pollInterval, "poll-interval", d.PollInterval, "wait after a batch that was not full (a full batch re-polls at once); with --listen, the fallback for delayed events and retries")
	f.Duration(&r.pollMin, "poll-min", 0, fmt.Sprintf("with --listen=false: the wait after a claim that found rows; each claim that finds none doubles it, up to --poll-interval (default %v, or --poll-interval when shorter)", relay.DefaultPollMin))
	f.Bool(&r.listen, "listen", !d.NoListen, "wake at once when an insert commits (LISTEN on the table's channel, migration 003) instead of at the next poll; PostgreSQL only: always off on MySQL/MariaDB, which poll adaptively (--poll-min)")
	f.Int(&r.maxAttempts, "max-attempts", d.MaxAttempts, "attempts before a transiently failing row is marked failed")
	f.Duration(&r.backoffMin, "backoff-min", d.BackoffMin, "retry delay after the first failed attempt (doubles per attempt, ±50% jitter)")
	f.Duration(&r.backoffMax, "backoff-max", d.BackoffMax, "longest retry delay")
	f.Duration(&r.publishTimeout, "publish-timeout", d.PublishTimeout, "bound on one publish; the lease is extended while it runs")
	f.Duration(&r.shutdownTimeout, "shutdown-timeout", d.ShutdownTimeout, "on SIGTERM, how long an in-flight publish may finish before its rows are released")
	f.Duration(&r.outageMin, "outage-backoff-min", d.OutageBackoffMin, "first wait before trying again while the database is unreachable (and between one-event probes of a sink that cannot be probed otherwise)")
	f.Duration(&r.outageMax, "outage-backoff-max", d.OutageBackoffMax, "longest wait before trying again while the database is unreachable (and between one-event probes of a sink that cannot be probed otherwise)")
	f.Duration(&r.probeInterval, "probe-interval", d.ProbeInterval, "while the sink is down, the wait between probes that publish nothing (Kafka: an ApiVersions request); the relay resumes within about this long of the sink's return")
	f.String(&r.orderedTopics, "ordered-topics", strings.Join(d.Ordering.Topics, ","), "comma-separated topics or patterns (each * any run of characters, as in --route: orders.*) whose keyed events are delivered in per-key order; * for all (default: none)")
	f.Int(&r.shards, "shards", d.Ordering.Shards, "ordered delivery: shards keys are spread over; every replica must use the same value")
	f.Int(&r.orderedLoops, "ordered-loops", d.Ordering.Loops, "ordered delivery: shards one replica serves at once, each by a loop that claims, publishes and records one batch at a time")
	f.Int(&r.shardBudget, "shard-budget", 0, fmt.Sprintf("ordered delivery: rows claimed from one shard before handing it back (default %d x --batch-min)", relay.DefaultShardBudgetBatches))
	f.String(&r.headOfLine, "head-of-line", string(d.Ordering.HeadOfLine), "ordered delivery: when a key's earliest event keeps failing, wait (hold the key) or park (fail it, go on)")
	f.Duration(&r.retention, "retention", d.Retention, "how long sent rows are kept before the janitor deletes them; failed rows are always kept")
	f.Bool(&r.keepSent, "keep-sent", d.KeepSent, "never delete sent rows: turns the retention janitor off")
	f.Duration(&r.janitorInterval, "janitor-interval", d.JanitorInterval, "how often the retention janitor may run, once across all replicas")
	f.Int(&r.janitorBatch, "janitor-batch", d.JanitorBatch, "most sent rows one DELETE of the retention janitor removes")
	f.Bool(&r.janitorVacuum, "janitor-vacuum", !d.NoVacuum, "after a retention run that deleted rows, VACUUM (ANALYZE) the table (the role must own it); false leaves it to autovacuum")
}

// configFlag maps relay.Config fields to the flags that set them ("Table",
// as a whole, to --table, the name a bad table is reported under).
// TestRunFlagsTakeTheirDefaultsFromConfig checks that it covers every
// field.
var configFlag = map[string]string{
	"ID": "relay-id", "BatchSize": "batch-size", "BatchMin": "batch-min", "BatchBytes": "batch-bytes", "MaxEventBytes": "max-event-bytes", "Workers": "workers", "Claim": "claim-mode", "NoListen": "listen", "Lease": "lease", "PollInterval": "poll-interval",
	"PollMin":     "poll-min",
	"MaxAttempts": "max-attempts", "BackoffMin": "backoff-min", "BackoffMax": "backoff-max",
	"PublishTimeout": "publish-timeout", "ShutdownTimeout": "shutdown-timeout",
	"Table": "table", "Table.Schema": "schema", "Table.Name": "table",
	"OutageBackoffMin": "outage-backoff-min", "OutageBackoffMax": "outage-backoff-max", "ProbeInterval": "probe-interval",
	"Ordering.Topics": "ordered-topics", "Ordering.Shards": "shards", "Ordering.Loops": "ordered-loops", "Ordering.ShardBudget": "shard-budget",
	"Ordering.HeadOfLine": "head-of-line", "Retention": "retention", "KeepSent": "keep-sent",
	"JanitorInterval": "janitor-interval", "JanitorBatch": "janitor-batch", "NoVacuum": "janitor-vacuum",
}

// config builds the relay.Config. Zero means "default" in relay.Config, so
// zero and negative flag values are refused here, naming the flag; the
// error lists each of them, and the config returned has them at their
// defaults so that relayProblems can check the rest.
func (r *relayFlags) config() (relay.Config, error) {
	cfg := relay.Config{
		ID: r.id, BatchSize: r.batchSize, BatchMin: r.batchMin, BatchBytes: r.batchBytes, MaxEventBytes: r.maxEventBytes, Workers: r.workers, Claim: relay.ClaimMode(r.claimMode), Lease: r.lease, PollInterval: r.pollInterval, PollMin: r.pollMin, NoListen: !r.listen,
		MaxAttempts: r.maxAttempts, BackoffMin: r.backoffMin, BackoffMax: r.backoffMax,
		PublishTimeout: r.publishTimeout, ShutdownTimeout: r.shutdownTimeout,
		OutageBackoffMin: r.outageMin, OutageBackoffMax: r.outageMax, ProbeInterval: r.probeInterval,
		Retention: r.retention, KeepSent: r.keepSent, JanitorInterval: r.janitorInterval, JanitorBatch: r.janitorBatch,
		NoVacuum: !r.janitorVacuum,
		Ordering: relay.Ordering{
			Topics: splitList(r.orderedTopics), Shards: r.shards, Loops: r.orderedLoops, ShardBudget: r.shardBudget,
			HeadOfLine: relay.HeadOfLine(r.headOfLine),
		},
	}
	// In the order of --help.
	positive := []struct {
		name string
		v    int64
		p    any // the field, zeroed when refused
	}{
		{"batch-size", int64(r.batchSize), &cfg.BatchSize}, {"batch-bytes", int64(r.batchBytes), &cfg.BatchBytes}, {"max-event-bytes", int64(r.maxEventBytes), &cfg.MaxEventBytes}, {"workers", int64(r.workers), &cfg.Workers},
		{"lease", int64(r.lease), &cfg.Lease}, {"poll-interval", int64(r.pollInterval), &cfg.PollInterval},
		{"max-attempts", int64(r.maxAttempts), &cfg.MaxAttempts},
		{"backoff-min", int64(r.backoffMin), &cfg.BackoffMin}, {"backoff-max", int64(r.backoffMax), &cfg.BackoffMax},
		{"publish-timeout", int64(r.publishTimeout), &cfg.PublishTimeout}, {"shutdown-timeout", int64(r.shutdownTimeout), &cfg.ShutdownTimeout},
		{"outage-backoff-min", int64(r.outageMin), &cfg.OutageBackoffMin}, {"outage-backoff-max", int64(r.outageMax), &cfg.OutageBackoffMax},
		{"probe-interval", int64(r.probeInterval), &cfg.ProbeInterval},
		{"shards", int64(r.shards), &cfg.Ordering.Shards}, {"ordered-loops", int64(r.orderedLoops), &cfg.Ordering.Loops}, {"retention", int64(r.retention), &cfg.Retention},
		{"janitor-interval", int64(r.janitorInterval), &cfg.JanitorInterval}, {"janitor-batch", int64(r.janitorBatch), &cfg.JanitorBatch},
	}
	var errs problems
	for _, p := range positive {
		if p.v > 0 {
			continue
		}
		reason := "must be positive"
		if p.name == "retention" {
			reason += "; --keep-sent keeps sent rows for ever"
		}
		errs.add(usageError("invalid value for --%s (%s): %s", p.name, envName(p.name), reason))
		reflect.ValueOf(p.p).Elem().SetZero()
	}
	return cfg, errs.err()
}

// relayProblems returns every invalid field of cfg, not only the first
// that relay.Config.Validate reports: each reported field is set back to
// its default and cfg is checked again.
func relayProblems(cfg relay.Config) []error {
	var out []error
	seen := map[string]bool{}
	for {
		err := cfg.Validate()
		if err == nil {
			return out
		}
		var ce *relay.ConfigError
		if !errors.As(err, &ce) || seen[ce.Field] {
			return append(out, err)
		}
		out, seen[ce.Field] = append(out, err), true
		if !sinks.ZeroField(&cfg, ce.Field) {
			return out
		}
	}
}

// asUsage turns a *relay.ConfigError into a usage error naming the flag.
func asUsage(err error) error {
	var ce *relay.ConfigError
	if errors.As(err, &ce) {
		if name := configFlag[ce.Field]; name != "" {
			return usageError("invalid value for --%s (%s): %s", name, envName(name), ce.Reason)
		}
	}
	return err
}

package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// Mode is what a run measures.
type Mode string

// The modes of Run.
const (
	// ModeBurnDown pre-writes Config.Events events and measures how fast
	// the relays drain them.
	ModeBurnDown Mode = "burn-down"
	// ModeSteady writes Config.Rate events per second, one per transaction,
	// and measures commit-to-receive latency.
	ModeSteady Mode = "steady"
	// ModeIdle runs the relays on an empty table for Config.Duration and
	// measures what they cost the database.
	ModeIdle Mode = "idle"
	// ModeSoak writes like ModeSteady for a long Config.Duration with the
	// relays' retention janitor on, and samples the table's size, dead
	// tuples, the janitor's job row and the claim and end-to-end latency
	// every Config.SampleEvery, to show whether they level off.
	ModeSoak Mode = "soak"
)

// Modes lists every mode, in the order the usage text gives them.
var Modes = []Mode{ModeBurnDown, ModeSteady, ModeIdle, ModeSoak}

// Defaults of Config.
const (
	DefaultSchema         = "outbox_bench"
	DefaultBatchSize      = 1000 // relay.Config's default
	DefaultPayloadBytes   = 200
	DefaultPollInterval   = 500 * time.Millisecond // relay.Config's default
	DefaultEvents         = 1_000_000
	DefaultRate           = 2000
	DefaultWriters        = 4
	DefaultSteadyDuration = 60 * time.Second
	DefaultIdleDuration   = 10 * time.Second
	DefaultGrace          = 10 * time.Second
	DefaultCeilingRows    = 200_000
	DefaultSampleInterval = 20 * time.Millisecond
	DefaultTimeout        = 30 * time.Minute

	// The soak's defaults: the 10 minutes at 500 events/s, sent
	// rows kept 30s, the janitor looking every 5s, a sample every 30s.
	DefaultSoakRate           = 500
	DefaultSoakDuration       = 10 * time.Minute
	DefaultRetention          = 30 * time.Second
	DefaultJanitorInterval    = 5 * time.Second
	DefaultJanitorBatch       = 1000 // relay.Config's default
	DefaultSampleEvery        = 30 * time.Second
	DefaultSoakSampleInterval = time.Second // pg_stat_activity, for oldest_xact_s; the claim comes from the relays' events
	minSampleEvery            = 100 * time.Millisecond
	minJanitorInterval        = 10 * time.Millisecond // relay.Config's bounds
	maxJanitorInterval        = 24 * time.Hour
	maxJanitorBatch           = 100000
)

// ceilingSuffix names the ceiling's schema after the run's: outbox_bench_ceiling.
const ceilingSuffix = "_ceiling"

// Config configures Run. Zero fields take the documented defaults.
type Config struct {
	// Mode is what to measure. Required.
	Mode Mode
	// DatabaseURL is the PostgreSQL server to measure, or a MySQL 8 or
	// MariaDB 10.6+ server as mysql://user:password@host:port/database,
	// in burn-down mode only (see the package documentation). Required.
	DatabaseURL string
	// Schema holds the outbox table of the runs. It is dropped and
	// recreated (and migrated) before every run, so Run refuses a schema
	// that exists but was not created by Run. The SQL ceiling works in
	// Schema + "_ceiling", dropped when it is done. Defaults to
	// "outbox_bench".
	Schema string
	// Sink is the sink of the registry (internal/sinks) the relays
	// publish to, one of Sinks. Defaults to "kafka".
	Sink string
	// SinkURL is the sink's --<sink>-url (nats-url, rabbitmq-url,
	// redis-url; pubsub-endpoint, a host:port): its server, given to the relays in their environment
	// (OUTBOX_NATS_URL, ...). Defaults to the sink's default, the local
	// server; the webhook sink's receiver runs in the harness's process on
	// a loopback port.
	SinkURL string
	// Brokers are the Kafka sink's --kafka-brokers. Defaults to none: Run
	// starts the sink's embedded broker (sinks.Embedder) in a process of
	// its own (BrokerBinary broker) and stops it at the end.
	Brokers []string
	// RelayBinary is the path of the relay binary: the relays run as
	// `RelayBinary run ...` child processes. Required.
	RelayBinary string
	// BrokerBinary is the path of the relay-bench binary: a sink's
	// embedded broker runs as `BrokerBinary broker --sink NAME` (see
	// ServeBroker). Required.
	BrokerBinary string
	// Relays lists the relay counts: the mode runs once per count.
	// Defaults to [1].
	Relays []int
	// BatchSize is the relays' --batch-size, and the batch of the SQL
	// ceiling. Defaults to DefaultBatchSize, the relay's default.
	BatchSize int
	// PayloadBytes is the size of every event's payload. Defaults to 200.
	PayloadBytes int
	// PollInterval is the relays' --poll-interval. Defaults to 500ms, the
	// relay's default.
	PollInterval time.Duration
	// RelayArgs are appended to every relay's command line, after the
	// harness's own flags, e.g. ["--listen=false"]; they must leave
	// --observe-file and --log-format alone, which the harness reads.
	// Defaults to none.
	RelayArgs []string
	// NoNotify disables the table's notify trigger (migration 003) after
	// migrating and runs the relays with --listen=false, so that they poll
	// (adaptively, see relay.Config.PollMin): what writers gain without
	// NOTIFY's commit-time lock, and what latency costs. Defaults to false.
	NoNotify bool
	// HoldSnapshot, in burn-down, steady and soak mode, holds a REPEATABLE READ
	// transaction open on a connection of its own from before the relays
	// start to the end of the run, after a query in it: VACUUM can then
	// remove none of the dead row versions the run leaves. Defaults to
	// false.
	HoldSnapshot bool
	// PartitionInterval, in soak mode, migrates the outbox table
	// partitioned by time with this interval, so that retention drops
	// whole partitions (docs/architecture.md#partitioned-tables). Defaults
	// to 0: an unpartitioned table.
	PartitionInterval time.Duration
	// Events is how many events burn-down pre-writes. Defaults to 1,000,000.
	Events int
	// Burst, in steady mode, is how many events one transaction writes at
	// BurstAt into the run, on a topic of their own, on top of the steady
	// stream: the steady events' latency before, during and after the
	// burst and the burst's drain time are recorded (SteadyStats.Burst).
	// 0: no burst.
	Burst int
	// BurstAt is when the burst is written, from the start of the steady
	// writes. Defaults to a third of Duration.
	BurstAt time.Duration
	// Rate is the events per second steady and soak mode write, over all
	// writers. Defaults to 2000 (steady) or 500 (soak).
	Rate int
	// Writers is the number of concurrent writers in steady and soak mode, each
	// with its own connection and Rate/Writers events per second.
	// Defaults to 4.
	Writers int
	// Duration is how long steady and soak mode write, or idle mode
	// watches. Defaults to 60s (steady), 10s (idle) or 10m (soak).
	Duration time.Duration
	// Grace is how long steady and soak mode wait, after the writers stop,
	// for the events still in flight; those not received by then count as
	// missing. Defaults to 10s.
	Grace time.Duration
	// Retention, JanitorInterval and JanitorBatch are the relays'
	// --retention, --janitor-interval and --janitor-batch in soak mode
	// (the other modes run the relays with their defaults: 7 days, 1m,
	// 1000). Default to 30s, 5s and 1000.
	Retention       time.Duration
	JanitorInterval time.Duration
	JanitorBatch    int
	// SampleEvery is how often soak mode samples the table and the
	// janitor, and the length of the windows of its claim and end-to-end
	// latencies. At least 100ms. Defaults to 30s.
	SampleEvery time.Duration
	// VacuumEvery, in soak mode, makes the harness run VACUUM (ANALYZE) on
	// the outbox table every VacuumEvery from the writers' start, throttled
	// like autovacuum by default (vacuum_cost_delay 2ms, vacuum_cost_limit
	// 200): a stand-in for autovacuum on a server where it is off
	// (SoakStats.Autovacuum says). Defaults to 0: never.
	VacuumEvery time.Duration
	// CeilingRows is how many rows the SQL ceiling fills before each of its
	// lifecycles. Defaults to 200,000.
	CeilingRows int
	// CeilingClients lists the client counts the SQL ceiling runs each
	// lifecycle with. Defaults to [1, 2].
	CeilingClients []int
	// NoCeiling skips the SQL ceiling. The ceiling runs in burn-down mode
	// only; the other modes have no throughput to compare with it.
	NoCeiling bool
	// SinkCeilingEvents is how many events the sink ceiling publishes
	// (burn-down, unless NoCeiling): the sink's publisher publishing
	// events like the relays' (the same payload size), in batches of
	// BatchSize, with no database. Defaults to Events.
	SinkCeilingEvents int
	// SampleInterval is how often Run samples pg_stat_activity for the
	// duration of the relays' statements. Negative disables sampling.
	// Defaults to 20ms (1s in soak mode, whose claim latency comes from
	// the relays' observer events).
	SampleInterval time.Duration
	// Timeout bounds each run. Defaults to 30m.
	Timeout time.Duration
	// Progress receives one line per step. Defaults to io.Discard.
	Progress io.Writer
}

// ConfigError reports an invalid Config field.
type ConfigError struct {
	// Field is the Config field name, e.g. "Events".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string { return "bench: invalid " + e.Field + ": " + e.Reason }

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.Sink == "" {
		c.Sink = "kafka"
	}
	if len(c.Relays) == 0 {
		c.Relays = []int{1}
	}
	if len(c.CeilingClients) == 0 {
		c.CeilingClients = []int{1, 2}
	}
	setDefault(&c.BatchSize, DefaultBatchSize)
	setDefault(&c.PayloadBytes, DefaultPayloadBytes)
	setDefault(&c.PollInterval, DefaultPollInterval)
	setDefault(&c.Events, DefaultEvents)
	setDefault(&c.SinkCeilingEvents, c.Events)
	switch c.Mode {
	case ModeIdle:
		setDefault(&c.Duration, DefaultIdleDuration)
	case ModeSoak:
		setDefault(&c.Rate, DefaultSoakRate)
		setDefault(&c.Duration, DefaultSoakDuration)
		setDefault(&c.Retention, DefaultRetention)
		setDefault(&c.JanitorInterval, DefaultJanitorInterval)
		setDefault(&c.JanitorBatch, DefaultJanitorBatch)
		setDefault(&c.SampleEvery, DefaultSampleEvery)
		setDefault(&c.SampleInterval, DefaultSoakSampleInterval)
	}
	setDefault(&c.Rate, DefaultRate)
	setDefault(&c.Writers, DefaultWriters)
	setDefault(&c.Duration, DefaultSteadyDuration)
	if c.Burst > 0 {
		setDefault(&c.BurstAt, c.Duration/3)
	}
	setDefault(&c.Grace, DefaultGrace)
	setDefault(&c.CeilingRows, DefaultCeilingRows)
	setDefault(&c.SampleInterval, DefaultSampleInterval)
	setDefault(&c.Timeout, DefaultTimeout)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Validate reports the first invalid field of c, after defaults, as a
// *ConfigError; Run checks it too. It reads nothing beyond c: a caller
// can check a Config before it builds the binaries the Config names.
func (c Config) Validate() error { return c.withDefaults().validate() }

// validate checks a defaulted config; the error is a *ConfigError.
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if err := c.validateMode(); err != nil {
		return err
	}
	if c.DatabaseURL == "" {
		return bad("DatabaseURL", "empty")
	}
	if isMySQL(c.DatabaseURL) {
		if err := c.validateMySQL(); err != nil {
			return err
		}
	} else if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		return bad("DatabaseURL", "%v", err)
	}
	if !slices.Contains(Sinks, c.Sink) {
		return bad("Sink", "%q is not one of %v", c.Sink, Sinks)
	}
	if _, err := c.sinkArgs(); err != nil {
		return err
	}
	if err := validateSchema(c.Schema); err != nil {
		return bad("Schema", "%v", err)
	}
	for _, r := range c.Relays {
		if r < 1 || r > 64 {
			return bad("Relays", "%d is not between 1 and 64", r)
		}
	}
	switch {
	case c.RelayBinary == "":
		return bad("RelayBinary", "empty")
	case c.BrokerBinary == "":
		return bad("BrokerBinary", "empty")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return bad("BatchSize", "%d is not between 1 and 10000", c.BatchSize)
	case c.PayloadBytes < 1 || c.PayloadBytes > outbox.DefaultMaxPayloadBytes:
		return bad("PayloadBytes", "%d is not between 1 and %d", c.PayloadBytes, outbox.DefaultMaxPayloadBytes)
	case c.PollInterval < time.Millisecond:
		return bad("PollInterval", "%v is shorter than 1ms", c.PollInterval)
	case c.Events < 1:
		return bad("Events", "%d is less than 1", c.Events)
	case c.SinkCeilingEvents < 1:
		return bad("SinkCeilingEvents", "%d is less than 1", c.SinkCeilingEvents)
	case c.Rate < 1:
		return bad("Rate", "%d is less than 1", c.Rate)
	case c.Writers < 1 || c.Writers > 256:
		return bad("Writers", "%d is not between 1 and 256", c.Writers)
	case c.Duration < 0:
		return bad("Duration", "%v is negative", c.Duration)
	case c.Grace < 0:
		return bad("Grace", "%v is negative", c.Grace)
	case c.Timeout < 0:
		return bad("Timeout", "%v is negative", c.Timeout)
	case c.Burst < 0:
		return bad("Burst", "%d is negative", c.Burst)
	case c.Burst > 0 && c.Mode != ModeSteady:
		return bad("Burst", "a burst is written in steady mode only")
	case c.Burst > 0 && (c.BurstAt < 0 || c.BurstAt >= c.Duration):
		return bad("BurstAt", "%v is not within the run's %v", c.BurstAt, c.Duration)
	}
	if c.Mode == ModeSoak {
		if err := c.validateSoak(); err != nil {
			return err
		}
	}
	return c.validateCeiling()
}

// sinkArgs are the flags of the sink SinkURL and Brokers set; the error,
// a *ConfigError, names a field the sink has no flag for.
func (c Config) sinkArgs() ([]string, error) {
	sk, _ := sinks.Named(c.Sink)
	_, fs, _ := sk.Parse()
	var args []string
	urlFlag := c.Sink + "-url"
	if f := serverFlag(fs, c.Sink); f != nil {
		urlFlag = f.Name
	}
	for _, f := range []struct{ field, flag, value string }{
		{"SinkURL", urlFlag, c.SinkURL},
		{"Brokers", "kafka-brokers", strings.Join(c.Brokers, ",")},
	} {
		switch {
		case f.value == "":
		case fs.Lookup(f.flag) == nil:
			return nil, &ConfigError{Field: f.field, Reason: fmt.Sprintf("the %s sink has no --%s", c.Sink, f.flag)}
		default:
			args = append(args, "--"+f.flag, f.value)
		}
	}
	return args, nil
}

// validateSoak checks the fields only soak mode uses; the janitor's bounds
// are the relay's, so that a bad value fails here rather than in the
// relays.
func (c Config) validateSoak() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Retention <= 0:
		return bad("Retention", "%v is not positive", c.Retention)
	case c.JanitorInterval < minJanitorInterval || c.JanitorInterval > maxJanitorInterval:
		return bad("JanitorInterval", "%v is not between %v and %v", c.JanitorInterval, minJanitorInterval, maxJanitorInterval)
	case c.JanitorBatch < 1 || c.JanitorBatch > maxJanitorBatch:
		return bad("JanitorBatch", "%d is not between 1 and %d", c.JanitorBatch, maxJanitorBatch)
	case c.SampleEvery < minSampleEvery:
		return bad("SampleEvery", "%v is shorter than %v", c.SampleEvery, minSampleEvery)
	case c.VacuumEvery < 0 || c.VacuumEvery > 0 && c.VacuumEvery < minSampleEvery:
		return bad("VacuumEvery", "%v is neither 0 (off) nor at least %v", c.VacuumEvery, minSampleEvery)
	case c.SampleEvery > c.Duration:
		return bad("SampleEvery", "%v is longer than the duration, %v", c.SampleEvery, c.Duration)
	case c.Timeout <= c.Duration+c.Grace:
		return bad("Timeout", "%v leaves no time to start and stop around the duration and the grace, %v", c.Timeout, c.Duration+c.Grace)
	}
	return nil
}

// validateMySQL checks a config with a mysql:// URL: burn-down only (the
// other modes read PostgreSQL's statistics views, pg_stat_activity,
// pg_stat_user_tables and pg_stat_database, and write through pgx), none
// of the PostgreSQL-only options, and a schema (a database, on MySQL)
// that is neither the URL's database nor one of the server's own, since
// Run drops it.
func (c Config) validateMySQL() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	mc, err := mysqlConfig(c.DatabaseURL)
	if err != nil {
		return bad("DatabaseURL", "%v", err)
	}
	lower := strings.ToLower(c.Schema)
	switch {
	case c.Mode != ModeBurnDown:
		return bad("DatabaseURL", "a mysql:// URL works in burn-down mode only: %s mode reads PostgreSQL's statistics views", c.Mode)
	case c.HoldSnapshot:
		return bad("HoldSnapshot", "PostgreSQL only")
	case c.NoNotify:
		return bad("NoNotify", "PostgreSQL only: on MySQL the relays always poll")
	case strings.EqualFold(c.Schema, mc.DBName):
		return bad("Schema", "%q is the database of the URL; the benchmark drops and recreates its schema, so give it a database of its own", c.Schema)
	case lower == "mysql" || lower == "sys" || lower == "performance_schema":
		return bad("Schema", "%q is not a database the benchmark may drop", c.Schema)
	case len(c.Schema+ceilingSuffix) > 64:
		return bad("Schema", "%q is too long for MySQL's database names with %q appended (64 characters)", c.Schema, ceilingSuffix)
	}
	return nil
}

func (c Config) validateMode() error {
	for _, m := range Modes {
		if c.Mode == m {
			return nil
		}
	}
	return &ConfigError{Field: "Mode", Reason: fmt.Sprintf("%q is not one of %v", c.Mode, Modes)}
}

// validateCeiling checks that every ceiling run does at least one batch.
func (c Config) validateCeiling() error {
	for _, n := range c.CeilingClients {
		if n < 1 || n > 64 {
			return &ConfigError{Field: "CeilingClients", Reason: fmt.Sprintf("%d is not between 1 and 64", n)}
		}
		if !c.NoCeiling && ceilingIterations(c.CeilingRows, c.BatchSize, n) < 1 {
			return &ConfigError{Field: "CeilingRows", Reason: fmt.Sprintf(
				"%d rows give %d clients less than one batch of %d each (3/4 of the rows are claimed)", c.CeilingRows, n, c.BatchSize)}
		}
	}
	return nil
}

// validateSchema refuses names the outbox package refuses, names too long
// for the ceiling's schema, and the schemas PostgreSQL and applications
// own: Run drops the schema.
func validateSchema(schema string) error {
	if err := (outbox.Table{Schema: schema + ceilingSuffix}).Validate(); err != nil {
		return err
	}
	lower := strings.ToLower(schema)
	if lower == "public" || lower == "information_schema" || strings.HasPrefix(lower, "pg_") {
		return fmt.Errorf("%q is not a schema the benchmark may drop", schema)
	}
	return nil
}

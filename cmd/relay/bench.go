package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/bench"
)

const benchUsage = `Usage: relay bench burn-down|steady|idle|soak [flags]

Measures relay processes on a real PostgreSQL (or, burn-down only, MySQL 8 or MariaDB 10.6+ with
--database-url mysql://user:password@host:port/database) and a sink (--sink; Kafka by default):

  burn-down   pre-write --events events, time --relays relays draining them, and compare with
              the SQL-only ceiling of the same lifecycle measured in the same run, and with the
              sink's publisher publishing the same events alone
  steady      write --rate events/s for --duration, one per transaction, and measure each
              event's latency from its commit to its arrival at a consumer
  idle        run relays on an empty table for --duration and measure the database load
  soak        write like steady for a long --duration with the relays' retention janitor on
              (--retention, --janitor-interval), sample the table's size, dead tuples, the
              janitor's job row and the claim and end-to-end latency every --sample-every, and
              say whether they level off

Every run drops and recreates --schema. The sink's server is --sink-url (its --<sink>-url) or, for
Kafka, --kafka-brokers; by default the local one, or what the sink starts: an embedded Kafka broker,
in its own process; a webhook receiver, in this one. A table is printed, or JSON with --json. Run
"relay bench <mode> --help" for the flags.`

// benchFlags are the flags of relay bench.
type benchFlags struct {
	url, schema, brokers, relays string
	sink, sinkURL                string
	relayArgs                    string
	batchSize, payload           int
	pollInterval, sampleInterval time.Duration
	timeout                      time.Duration
	jsonOut, notify, holdSnap    bool
	pprofAddr                    string

	events, ceilingRows, sinkCeilingEvents int
	ceilingClients, ceilingScript          string
	noCeiling                              bool

	rate, writers, burst     int
	duration, grace, burstAt time.Duration

	retention, janitorInterval, sampleEvery, vacuumEvery time.Duration
	partitionInterval                                    time.Duration
	janitorBatch                                         int
}

func (b *benchFlags) register(f *flags, mode bench.Mode) {
	f.String(&b.url, "database-url", defaultDemoURL, "PostgreSQL connection URL, or mysql://user:password@host:port/database for MySQL or MariaDB (burn-down only)")
	f.String(&b.schema, "schema", bench.DefaultSchema, "schema of the outbox table, dropped and recreated for every run (the ceiling uses <schema>_ceiling)")
	f.String(&b.sink, "sink", defaultSink, "what the relays publish to: "+strings.Join(bench.Sinks, ", "))
	f.String(&b.sinkURL, "sink-url", "", "the sink's server, as its --<sink>-url (--nats-url, ...), given to the relays in that flag's variable (OUTBOX_NATS_URL, ...); default: the sink's own, the local server")
	f.String(&b.brokers, "kafka-brokers", "", "comma-separated Kafka brokers (default: an embedded kfake broker in its own process)")
	f.String(&b.relays, "relays", "1", "comma-separated relay counts; the mode runs once per count")
	f.Int(&b.batchSize, "batch-size", bench.DefaultBatchSize, "the relays' --batch-size, and the SQL ceiling's batch")
	f.Int(&b.payload, "payload", bench.DefaultPayloadBytes, "payload bytes per event")
	f.Duration(&b.pollInterval, "poll-interval", bench.DefaultPollInterval, "the relays' --poll-interval")
	f.Bool(&b.notify, "notify", true, "keep the table's notify trigger and the relays' LISTEN; false disables the trigger and runs the relays with --listen=false (they poll adaptively)")
	f.Bool(&b.holdSnap, "hold-snapshot", false, "burn-down, steady, soak: hold a REPEATABLE READ transaction open in the database for the whole run, as a long query or pg_dump does, so that VACUUM removes no dead row versions")
	f.String(&b.relayArgs, "relay-args", "", `more flags for every relay, space-separated, e.g. "--listen=false"`)
	sampleInterval := bench.DefaultSampleInterval
	if mode == bench.ModeSoak {
		sampleInterval = bench.DefaultSoakSampleInterval
	}
	f.Duration(&b.sampleInterval, "sample-interval", sampleInterval, "how often pg_stat_activity is sampled for statement durations; 0 turns sampling off")
	f.Duration(&b.timeout, "timeout", bench.DefaultTimeout, "bound on each run")
	f.Bool(&b.jsonOut, "json", false, "print JSON instead of a table")
	f.String(&b.pprofAddr, "pprof-addr", "", `serve the harness's own Go profiles (writers, consumer) on this loopback address; profile a relay with --relay-args "--pprof-addr ..."`)
	switch mode {
	case bench.ModeBurnDown:
		f.Int(&b.events, "events", bench.DefaultEvents, "events to pre-write and drain")
		f.Int(&b.ceilingRows, "ceiling-rows", bench.DefaultCeilingRows, "rows of the SQL ceiling's table")
		f.String(&b.ceilingClients, "ceiling-clients", "1,2", "comma-separated client counts of the SQL ceiling")
		f.Int(&b.sinkCeilingEvents, "sink-ceiling-events", 0, "events the sink ceiling (the sink's publisher alone) publishes (default: --events)")
		f.Bool(&b.noCeiling, "no-ceiling", false, "skip the SQL ceiling and the sink ceiling")
		f.String(&b.ceilingScript, "ceiling-script", "", "also run this copy of shared/bench/ceiling.sh, before and after the runs, and give each run's ratio to the mean of the two (needs psql and pgbench on PATH)")
	case bench.ModeSteady:
		f.Int(&b.rate, "rate", bench.DefaultRate, "events per second, over all writers")
		f.Int(&b.writers, "writers", bench.DefaultWriters, "concurrent writers, one event per transaction each")
		f.Duration(&b.duration, "duration", bench.DefaultSteadyDuration, "how long to write")
		f.Duration(&b.grace, "grace", bench.DefaultGrace, "how long to wait for events in flight after the writers stop; later ones count as missing")
		f.Int(&b.burst, "burst", 0, "also write this many events in one transaction, on a topic of their own, at --burst-at: the steady events' latency before, during and after it, and its drain time, are reported")
		f.Duration(&b.burstAt, "burst-at", 0, "when the burst is written, from the start of the writes (default: a third of --duration)")
	case bench.ModeIdle:
		f.Duration(&b.duration, "duration", bench.DefaultIdleDuration, "how long to watch the idle relays")
	case bench.ModeSoak:
		f.Int(&b.rate, "rate", bench.DefaultSoakRate, "events per second, over all writers")
		f.Int(&b.writers, "writers", bench.DefaultWriters, "concurrent writers, one event per transaction each")
		f.Duration(&b.duration, "duration", bench.DefaultSoakDuration, "how long to write")
		f.Duration(&b.grace, "grace", bench.DefaultGrace, "how long to wait for events in flight after the writers stop; later ones count as missing")
		f.Duration(&b.retention, "retention", bench.DefaultRetention, "the relays' --retention: how long sent rows are kept")
		f.Duration(&b.janitorInterval, "janitor-interval", bench.DefaultJanitorInterval, "the relays' --janitor-interval")
		f.Int(&b.janitorBatch, "janitor-batch", bench.DefaultJanitorBatch, "the relays' --janitor-batch")
		f.Duration(&b.sampleEvery, "sample-every", bench.DefaultSampleEvery, "how often to sample the table and the janitor; also the window of each sample's latencies")
		f.Duration(&b.partitionInterval, "partition-interval", 0, "migrate the outbox table partitioned by time with this interval, so that retention drops whole partitions; 0 is unpartitioned")
		f.Duration(&b.vacuumEvery, "vacuum-every", 0, "run VACUUM (ANALYZE) on the table this often, throttled like autovacuum: a stand-in where autovacuum is off; 0 is never")
	}
}

// config builds the bench.Config. Zero means "default" there, so zero
// and negative values are rejected here, naming the flag.
func (b *benchFlags) config(mode bench.Mode) (bench.Config, error) {
	positive := map[string]int64{
		"batch-size": int64(b.batchSize), "payload": int64(b.payload),
		"poll-interval": int64(b.pollInterval), "timeout": int64(b.timeout),
	}
	switch mode {
	case bench.ModeBurnDown:
		positive["events"], positive["ceiling-rows"] = int64(b.events), int64(b.ceilingRows)
	case bench.ModeSteady:
		positive["rate"], positive["writers"] = int64(b.rate), int64(b.writers)
		positive["duration"], positive["grace"] = int64(b.duration), int64(b.grace)
	case bench.ModeIdle:
		positive["duration"] = int64(b.duration)
	case bench.ModeSoak:
		positive["rate"], positive["writers"] = int64(b.rate), int64(b.writers)
		positive["duration"], positive["grace"] = int64(b.duration), int64(b.grace)
		positive["retention"], positive["janitor-interval"] = int64(b.retention), int64(b.janitorInterval)
		positive["janitor-batch"], positive["sample-every"] = int64(b.janitorBatch), int64(b.sampleEvery)
	}
	for name, v := range positive {
		if v <= 0 {
			return bench.Config{}, usageError("invalid value for --%s (%s): must be positive", name, envName(name))
		}
	}
	if b.sinkCeilingEvents < 0 {
		return bench.Config{}, usageError("invalid value for --sink-ceiling-events (%s): must not be negative", envName("sink-ceiling-events"))
	}
	if b.vacuumEvery < 0 {
		return bench.Config{}, usageError("invalid value for --vacuum-every (%s): must not be negative", envName("vacuum-every"))
	}
	if b.sampleInterval < 0 {
		return bench.Config{}, usageError("invalid value for --sample-interval (%s): must not be negative", envName("sample-interval"))
	}
	relays, err := intList("relays", b.relays)
	if err != nil {
		return bench.Config{}, err
	}
	cfg := bench.Config{
		Mode: mode, DatabaseURL: b.url, Schema: b.schema, Brokers: splitList(b.brokers), Relays: relays,
		Sink: b.sink, SinkURL: b.sinkURL, SinkCeilingEvents: b.sinkCeilingEvents,
		RelayArgs: strings.Fields(b.relayArgs), NoNotify: !b.notify, HoldSnapshot: b.holdSnap,
		BatchSize: b.batchSize, PayloadBytes: b.payload,
		PollInterval: b.pollInterval, SampleInterval: b.sampleInterval, Timeout: b.timeout,
		Events: b.events, CeilingRows: b.ceilingRows, NoCeiling: b.noCeiling, CeilingScript: b.ceilingScript,
		Rate: b.rate, Writers: b.writers, Duration: b.duration, Grace: b.grace, Burst: b.burst, BurstAt: b.burstAt,
		Retention: b.retention, JanitorInterval: b.janitorInterval, JanitorBatch: b.janitorBatch, SampleEvery: b.sampleEvery,
		VacuumEvery: b.vacuumEvery, PartitionInterval: b.partitionInterval,
	}
	if b.sampleInterval == 0 {
		cfg.SampleInterval = -1 // off
	}
	if mode == bench.ModeBurnDown {
		if cfg.CeilingClients, err = intList("ceiling-clients", b.ceilingClients); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// intList parses a comma-separated list of positive integers.
func intList(name, value string) ([]int, error) {
	var out []int
	for _, item := range splitList(value) {
		n, err := strconv.Atoi(item)
		if err != nil || n < 1 {
			return nil, usageError("invalid value for --%s (%s): %q is not a positive integer", name, envName(name), item)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, usageError("invalid value for --%s (%s): empty list", name, envName(name))
	}
	return out, nil
}

// benchConfigFlag maps bench.Config fields to the flags that set them.
var benchConfigFlag = map[string]string{
	"DatabaseURL": "database-url", "Schema": "schema", "Relays": "relays", "BatchSize": "batch-size",
	"PayloadBytes": "payload", "PollInterval": "poll-interval",
	"Events": "events", "Rate": "rate", "Writers": "writers", "Duration": "duration", "Grace": "grace",
	"Burst": "burst", "BurstAt": "burst-at",
	"CeilingRows": "ceiling-rows", "CeilingClients": "ceiling-clients", "Timeout": "timeout",
	"Retention": "retention", "JanitorInterval": "janitor-interval", "JanitorBatch": "janitor-batch", "SampleEvery": "sample-every",
	"VacuumEvery": "vacuum-every", "Sink": "sink", "SinkURL": "sink-url", "SinkCeilingEvents": "sink-ceiling-events",
	"Brokers": "kafka-brokers", "HoldSnapshot": "hold-snapshot", "NoNotify": "notify", "CeilingScript": "ceiling-script",
}

// benchUsageErr turns configuration errors of bench.Run into usage errors
// naming the flag.
func benchUsageErr(err error) error {
	var ce *bench.ConfigError
	switch {
	case errors.As(err, &ce) && benchConfigFlag[ce.Field] != "":
		name := benchConfigFlag[ce.Field]
		return usageError("invalid value for --%s (%s): %s", name, envName(name), redactDSN(ce.Reason))
	case errors.Is(err, bench.ErrForeignSchema):
		return usageError("invalid value for --schema (%s): %v", envName("schema"), err)
	}
	return err
}

func runBench(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, benchUsage)
		return usageError("bench needs a mode: burn-down, steady, idle or soak")
	}
	mode, rest := args[0], args[1:]
	switch mode {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, benchUsage)
		return flag.ErrHelp
	case bench.BrokerCommand:
		return runBenchBroker(ctx, rest, getenv, stdout, stderr)
	}
	m := bench.Mode(mode)
	if !slices.Contains(bench.Modes, m) {
		return usageError("unknown bench mode %q: use burn-down, steady, idle or soak", mode)
	}
	f := newFlags("relay bench "+mode, benchUsage, stdout, getenv)
	var bf benchFlags
	bf.register(f, m)
	if err := f.parse(rest); err != nil {
		return err
	}
	if len(f.args()) > 0 {
		return usageError("unexpected arguments %q", f.args())
	}
	cfg, err := bf.config(m)
	if err != nil {
		return err
	}
	if cfg.RelayBinary, err = os.Executable(); err != nil {
		return fmt.Errorf("find the relay binary: %w", err)
	}
	cfg.Progress = stderr
	if bf.pprofAddr != "" {
		if !isLoopbackAddr(bf.pprofAddr) {
			return usageError("invalid value for --pprof-addr (%s): %s", envName("pprof-addr"), notLoopback(bf.pprofAddr))
		}
		bound, stop, err := servePprof(bf.pprofAddr)
		if err != nil {
			return usageError("invalid value for --pprof-addr (%s): %v", envName("pprof-addr"), err)
		}
		defer stop()
		fmt.Fprintf(stderr, "serving the harness's profiles on http://%s/debug/pprof/\n", bound)
	}
	rep, err := bench.Run(ctx, cfg)
	if rep != nil && len(rep.Runs)+len(rep.Ceiling) > 0 {
		if perr := printReport(stdout, rep, bf.jsonOut); perr != nil && err == nil {
			err = perr
		}
	}
	return benchUsageErr(err)
}

func printReport(w io.Writer, rep *bench.Report, asJSON bool) error {
	if !asJSON {
		return rep.WriteTable(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// runBenchBroker is the hidden `relay bench broker`: a sink's embedded
// broker, which relay bench starts in its own process.
func runBenchBroker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("relay bench broker", "Usage: relay bench broker [flags]\n\n"+
		"Serves the sink's embedded broker on a free loopback port until SIGTERM; prints the sink's flags that point at it.", stdout, getenv)
	var sink string
	f.String(&sink, "sink", defaultSink, "the sink whose broker to serve")
	if err := f.parse(args); err != nil {
		return err
	}
	return bench.ServeBroker(ctx, stdout, sink)
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/bench"
)

// The flags are the flag package's, named --like-this. They have no
// environment variables, unlike relay's: relay-bench runs by hand or from
// a script in a clone, where a flag is as easy to give, not in a
// deployment's environment.

// defaultDatabaseURL is the local PostgreSQL of a development machine.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres"

// benchFlags are the flags of the modes.
type benchFlags struct {
	url, schema, brokers, relays string
	sink, sinkURL                string
	relayBin, relayArgs          string
	batchSize, payload           int
	pollInterval, sampleInterval time.Duration
	timeout                      time.Duration
	jsonOut, notify, holdSnap    bool
	pprofAddr                    string

	events, ceilingRows, sinkCeilingEvents int
	ceilingClients                         string
	noCeiling                              bool

	rate, writers, burst     int
	duration, grace, burstAt time.Duration

	retention, janitorInterval, sampleEvery, vacuumEvery time.Duration
	partitionInterval                                    time.Duration
	janitorBatch                                         int
}

// flagSet returns mode's flags, bound to b.
func (b *benchFlags) flagSet(mode bench.Mode) *flag.FlagSet {
	f := flag.NewFlagSet(string(mode), flag.ContinueOnError)
	f.StringVar(&b.url, "database-url", defaultDatabaseURL, "PostgreSQL connection URL, or mysql://user:password@host:port/database for MySQL or MariaDB (burn-down only)")
	f.StringVar(&b.schema, "schema", bench.DefaultSchema, "schema of the outbox table, dropped and recreated for every run (the ceiling uses <schema>_ceiling)")
	f.StringVar(&b.relayBin, "relay-bin", "", `the relay binary the relays run (default: one built with "go build ./cmd/relay" from the working directory's module)`)
	f.StringVar(&b.sink, "sink", "kafka", "what the relays publish to: "+strings.Join(bench.Sinks, ", "))
	f.StringVar(&b.sinkURL, "sink-url", "", "the sink's server, as its --<sink>-url (--nats-url, ...), given to the relays in that flag's variable (OUTBOX_NATS_URL, ...); default: the sink's own, the local server")
	f.StringVar(&b.brokers, "kafka-brokers", "", "comma-separated Kafka brokers (default: an embedded kfake broker in its own process)")
	f.StringVar(&b.relays, "relays", "1", "comma-separated relay counts; the mode runs once per count")
	f.IntVar(&b.batchSize, "batch-size", bench.DefaultBatchSize, "the relays' --batch-size, and the SQL ceiling's batch")
	f.IntVar(&b.payload, "payload", bench.DefaultPayloadBytes, "payload bytes per event")
	f.DurationVar(&b.pollInterval, "poll-interval", bench.DefaultPollInterval, "the relays' --poll-interval")
	f.BoolVar(&b.notify, "notify", true, "keep the table's notify trigger and the relays' LISTEN; false disables the trigger and runs the relays with --listen=false (they poll adaptively)")
	f.BoolVar(&b.holdSnap, "hold-snapshot", false, "burn-down, steady, soak: hold a REPEATABLE READ transaction open in the database for the whole run, as a long query or pg_dump does, so that VACUUM removes no dead row versions")
	f.StringVar(&b.relayArgs, "relay-args", "", `more flags for every relay, space-separated, e.g. "--listen=false"`)
	sampleInterval := bench.DefaultSampleInterval
	if mode == bench.ModeSoak {
		sampleInterval = bench.DefaultSoakSampleInterval
	}
	f.DurationVar(&b.sampleInterval, "sample-interval", sampleInterval, "how often pg_stat_activity is sampled for statement durations; 0 turns sampling off")
	f.DurationVar(&b.timeout, "timeout", bench.DefaultTimeout, "bound on each run")
	f.BoolVar(&b.jsonOut, "json", false, "print JSON instead of a table")
	f.StringVar(&b.pprofAddr, "pprof-addr", "", `serve the harness's own Go profiles (writers, consumer) on this loopback address; profile a relay with --relay-args "--pprof-addr ..."`)
	switch mode {
	case bench.ModeBurnDown:
		f.IntVar(&b.events, "events", bench.DefaultEvents, "events to pre-write and drain")
		f.IntVar(&b.ceilingRows, "ceiling-rows", bench.DefaultCeilingRows, "rows of the SQL ceiling's table")
		f.StringVar(&b.ceilingClients, "ceiling-clients", "1,2", "comma-separated client counts of the SQL ceiling")
		f.IntVar(&b.sinkCeilingEvents, "sink-ceiling-events", 0, "events the sink ceiling (the sink's publisher alone) publishes (default: --events)")
		f.BoolVar(&b.noCeiling, "no-ceiling", false, "skip the SQL ceiling and the sink ceiling")
	case bench.ModeSteady:
		f.IntVar(&b.rate, "rate", bench.DefaultRate, "events per second, over all writers")
		f.IntVar(&b.writers, "writers", bench.DefaultWriters, "concurrent writers, one event per transaction each")
		f.DurationVar(&b.duration, "duration", bench.DefaultSteadyDuration, "how long to write")
		f.DurationVar(&b.grace, "grace", bench.DefaultGrace, "how long to wait for events in flight after the writers stop; later ones count as missing")
		f.IntVar(&b.burst, "burst", 0, "also write this many events in one transaction, on a topic of their own, at --burst-at: the steady events' latency before, during and after it, and its drain time, are reported")
		f.DurationVar(&b.burstAt, "burst-at", 0, "when the burst is written, from the start of the writes (default: a third of --duration)")
	case bench.ModeIdle:
		f.DurationVar(&b.duration, "duration", bench.DefaultIdleDuration, "how long to watch the idle relays")
	case bench.ModeSoak:
		f.IntVar(&b.rate, "rate", bench.DefaultSoakRate, "events per second, over all writers")
		f.IntVar(&b.writers, "writers", bench.DefaultWriters, "concurrent writers, one event per transaction each")
		f.DurationVar(&b.duration, "duration", bench.DefaultSoakDuration, "how long to write")
		f.DurationVar(&b.grace, "grace", bench.DefaultGrace, "how long to wait for events in flight after the writers stop; later ones count as missing")
		f.DurationVar(&b.retention, "retention", bench.DefaultRetention, "the relays' --retention: how long sent rows are kept")
		f.DurationVar(&b.janitorInterval, "janitor-interval", bench.DefaultJanitorInterval, "the relays' --janitor-interval")
		f.IntVar(&b.janitorBatch, "janitor-batch", bench.DefaultJanitorBatch, "the relays' --janitor-batch")
		f.DurationVar(&b.sampleEvery, "sample-every", bench.DefaultSampleEvery, "how often to sample the table and the janitor; also the window of each sample's latencies")
		f.DurationVar(&b.partitionInterval, "partition-interval", 0, "migrate the outbox table partitioned by time with this interval, so that retention drops whole partitions; 0 is unpartitioned")
		f.DurationVar(&b.vacuumEvery, "vacuum-every", 0, "run VACUUM (ANALYZE) on the table this often, throttled like autovacuum: a stand-in where autovacuum is off; 0 is never")
	}
	return f
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
			return bench.Config{}, usagef("invalid value for --%s: must be positive", name)
		}
	}
	for name, v := range map[string]int64{"sink-ceiling-events": int64(b.sinkCeilingEvents),
		"vacuum-every": int64(b.vacuumEvery), "sample-interval": int64(b.sampleInterval)} {
		if v < 0 {
			return bench.Config{}, usagef("invalid value for --%s: must not be negative", name)
		}
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
		Events: b.events, CeilingRows: b.ceilingRows, NoCeiling: b.noCeiling,
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
			return nil, usagef("invalid value for --%s: %q is not a positive integer", name, item)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, usagef("invalid value for --%s: empty list", name)
	}
	return out, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// configFlag maps bench.Config fields to the flags that set them.
var configFlag = map[string]string{
	"DatabaseURL": "database-url", "Schema": "schema", "Relays": "relays", "BatchSize": "batch-size",
	"PayloadBytes": "payload", "PollInterval": "poll-interval",
	"Events": "events", "Rate": "rate", "Writers": "writers", "Duration": "duration", "Grace": "grace",
	"Burst": "burst", "BurstAt": "burst-at",
	"CeilingRows": "ceiling-rows", "CeilingClients": "ceiling-clients", "Timeout": "timeout",
	"Retention": "retention", "JanitorInterval": "janitor-interval", "JanitorBatch": "janitor-batch", "SampleEvery": "sample-every",
	"VacuumEvery": "vacuum-every", "Sink": "sink", "SinkURL": "sink-url", "SinkCeilingEvents": "sink-ceiling-events",
	"Brokers": "kafka-brokers", "HoldSnapshot": "hold-snapshot", "NoNotify": "notify", "RelayBinary": "relay-bin",
}

// flagError turns the configuration errors of bench.Config into usage
// errors naming the flag.
func flagError(err error) error {
	var ce *bench.ConfigError
	switch {
	case errors.As(err, &ce) && configFlag[ce.Field] != "":
		return usagef("invalid value for --%s: %s", configFlag[ce.Field], ce.Reason)
	case errors.Is(err, bench.ErrForeignSchema):
		return usagef("invalid value for --schema: %v", err)
	}
	return err
}

// parse reads args into fs. For -h or --help it prints synopsis and the
// flags to help and returns flag.ErrHelp; a bad command line is a usage
// error naming the flag --like-this.
func parse(fs *flag.FlagSet, args []string, synopsis string, help io.Writer) error {
	fs.SetOutput(io.Discard) // parse words the errors itself
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(help, "%s\n\nFlags of relay-bench %s:\n", synopsis, fs.Name())
		fs.VisitAll(func(f *flag.Flag) {
			kind, text := flag.UnquoteUsage(f)
			if kind != "" {
				kind = " " + kind
			}
			if d := f.DefValue; d != "" && d != "0" && d != "0s" && d != "false" {
				text += " (default " + d + ")"
			}
			fmt.Fprintf(help, "  --%s%s\n        %s\n", f.Name, kind, text)
		})
		return flag.ErrHelp
	case err != nil:
		msg := strings.NewReplacer("for flag -", "for --", "defined: -", "defined: --", "argument: -", "argument: --").Replace(err.Error())
		return usagef("%s; run \"relay-bench %s --help\" for the flags", msg, fs.Name())
	case fs.NArg() > 0:
		return usagef("unexpected arguments %q", fs.Args())
	}
	return nil
}

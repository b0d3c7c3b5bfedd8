package bench

import (
	"math"
	"slices"
	"time"
)

// Report is the outcome of Run: the settings, the SQL ceiling and one
// Result per relay count. It encodes to the JSON that `relay-bench --json`
// prints; the field names are stable.
type Report struct {
	// Mode is the mode of every run.
	Mode Mode `json:"mode"`
	// Settings are the knobs the runs used.
	Settings Settings `json:"settings"`
	// Ceiling is the SQL-only ceiling measured in this invocation, one
	// entry per lifecycle and client count; empty when it was not run.
	Ceiling []CeilingResult `json:"ceiling"`
	// SinkCeiling is the sink ceiling measured in this invocation
	// (burn-down, unless Config.NoCeiling); absent otherwise.
	SinkCeiling *SinkCeilingResult `json:"sink_ceiling,omitempty"`
	// Runs has one Result per relay count, in the order of Config.Relays.
	Runs []Result `json:"runs"`
}

// Settings echo the configuration of a Report. The database URL is not
// included: it may hold a password.
type Settings struct {
	// Database is "postgresql" or "mysql" (MySQL or MariaDB, whose
	// version ServerVersion gives, e.g. "MariaDB 10.11.19").
	Database      string `json:"database"`
	ServerVersion string `json:"server_version,omitempty"`
	// Schema is the schema of the outbox table (on MySQL, its database).
	Schema string `json:"schema"`
	// Sink is the sink the relays published to; SinkURL its
	// --<sink>-url (password hidden; the webhook receiver's URL
	// template), Brokers its --kafka-brokers, where it has them;
	// EmbeddedBroker is set when the broker ran embedded in a process of
	// its own (`relay-bench broker`).
	Sink           string   `json:"sink,omitempty"`
	SinkURL        string   `json:"sink_url,omitempty"`
	Brokers        []string `json:"brokers"`
	EmbeddedBroker bool     `json:"embedded_broker"`
	BatchSize      int      `json:"batch_size"`
	PayloadBytes   int      `json:"payload_bytes"`
	PollIntervalMS float64  `json:"poll_interval_ms"`
	RelayArgs      []string `json:"relay_args,omitempty"`
	NoNotify       bool     `json:"no_notify,omitempty"`
	Events         int      `json:"events,omitempty"`
	Rate           int      `json:"rate,omitempty"`
	Writers        int      `json:"writers,omitempty"`
	DurationS      float64  `json:"duration_s,omitempty"`
	GraceS         float64  `json:"grace_s,omitempty"`
	CeilingRows    int      `json:"ceiling_rows,omitempty"`
	// The soak's janitor settings and sampling period.
	RetentionS       float64 `json:"retention_s,omitempty"`
	JanitorIntervalS float64 `json:"janitor_interval_s,omitempty"`
	// PartitionIntervalS is Config.PartitionInterval: the table is
	// partitioned by time when it is set.
	PartitionIntervalS float64 `json:"partition_interval_s,omitempty"`
	JanitorBatch       int     `json:"janitor_batch,omitempty"`
	SampleEveryS       float64 `json:"sample_every_s,omitempty"`
	VacuumEveryS       float64 `json:"vacuum_every_s,omitempty"`
}

// CeilingResult is one lifecycle of the SQL-only ceiling.
type CeilingResult struct {
	// Lifecycle is "mark_sent" (claim UPDATE, then an UPDATE to sent) or
	// "delete_sent" (claim UPDATE, then DELETE). On MySQL it is
	// "mark_sent" (the claim transaction, then the mark-sent UPDATE in a
	// transaction of its own) or "mark_sent_in_claim" (each batch marked
	// sent in the next claim's transaction).
	Lifecycle string `json:"lifecycle"`
	// Clients is the number of concurrent connections looping.
	Clients int `json:"clients"`
	// Rows is how many rows the table held at the start; Batch the rows
	// one claim takes.
	Rows  int `json:"rows"`
	Batch int `json:"batch"`
	// Events is how many rows went through the lifecycle, in Seconds.
	Events  int     `json:"events"`
	Seconds float64 `json:"seconds"`
	// EventsPerSecond is Events / Seconds.
	EventsPerSecond float64 `json:"events_per_s"`
	// HostCPUBusy is the share (0 to 1) of the host's CPUs that was busy
	// meanwhile, whoever used it; nil where /proc/stat cannot be read.
	HostCPUBusy *float64 `json:"host_cpu_busy"`
	// Phases (MySQL only) times each step of a loop; absent on
	// PostgreSQL.
	Phases *CeilingPhases `json:"phases,omitempty"`
}

// CeilingPhases time the steps of the MySQL ceiling's loops as their
// clients see them, round trip included: the claim's SELECT ... FOR
// UPDATE SKIP LOCKED with the reading of its rows' sizes, its lease
// UPDATE, its SELECT of the rows' payloads, its COMMIT, and the mark-sent
// UPDATE (with its own commit when it runs apart).
type CeilingPhases struct {
	Lock     PhaseTiming `json:"lock"`
	Lease    PhaseTiming `json:"lease"`
	Read     PhaseTiming `json:"read"`
	Commit   PhaseTiming `json:"commit"`
	MarkSent PhaseTiming `json:"mark_sent"`
}

// PhaseTiming is one step of a loop: its durations in ms, and its share
// of the clients' time (the sum of its durations over clients x
// Seconds), which says which statement dominates.
type PhaseTiming struct {
	MS    *Percentiles `json:"ms"`
	Share float64      `json:"share"`
}

// SinkCeilingResult is the sink ceiling: the sink's publisher (the one the
// relays run) publishing events like the relays' (the same payload size)
// to a destination like theirs, with no database, in
// batches of the relays' --batch-size, Workers batches at a time (a
// relay's default workers).
type SinkCeilingResult struct {
	Sink    string `json:"sink"`
	Batch   int    `json:"batch"`
	Workers int    `json:"workers"`
	// Events were published and acknowledged in Seconds, from the first
	// publish to the last acknowledgement.
	Events          int     `json:"events"`
	Seconds         float64 `json:"seconds"`
	EventsPerSecond float64 `json:"events_per_s"`
	// Publish is the time of one batch, publish to its last
	// acknowledgement, in ms: compare with Result.Publish.
	Publish *Percentiles `json:"publish_ms"`
	// HostCPUBusy is the share (0 to 1) of the host's CPUs that was busy
	// meanwhile (the publisher, the sink's server, the webhook receiver and
	// anything else on the host); nil where /proc/stat cannot be read. A
	// ceiling near 1 saturates the host: a relay that does the database's
	// work too, on the same CPUs, cannot come near it.
	HostCPUBusy *float64 `json:"host_cpu_busy"`
}

// Result is one run: one mode with one relay count.
type Result struct {
	Mode   Mode `json:"mode"`
	Relays int  `json:"relays"`
	// BatchSize is the relays' --batch-size.
	BatchSize int `json:"batch_size"`
	// Events is, for burn-down, the events pre-written and drained; for
	// steady and soak, the events committed; 0 for idle.
	Events int `json:"events"`
	// Seconds is, for burn-down, the drain time: from the relays' start
	// (database clock just before the processes start) to the last
	// sent_at; for steady and soak, the writing time (first scheduled
	// write to last commit); for idle, the time watched.
	Seconds float64 `json:"seconds"`
	// EventsPerSecond is Events / Seconds: burn-down throughput, or the
	// achieved write rate in steady and soak mode.
	EventsPerSecond float64 `json:"events_per_s"`
	// CeilingRatio is EventsPerSecond divided by the mark_sent ceiling at
	// one client measured in the same invocation (burn-down only; null
	// otherwise).
	CeilingRatio *float64 `json:"ceiling_ratio"`
	// SinkCeilingRatio is EventsPerSecond divided by the sink ceiling's
	// events per second measured in the same invocation (burn-down;
	// absent otherwise).
	SinkCeilingRatio *float64 `json:"sink_ceiling_ratio,omitempty"`

	// RelayCPUSeconds is the user+system CPU time of all relay processes,
	// from their start to their exit (getrusage of the children).
	RelayCPUSeconds float64 `json:"relay_cpu_s"`
	// RelayPeakRSSMB is the largest peak resident set of the relay
	// processes, in MiB: VmHWM of /proc/<pid>/status read just before
	// SIGTERM (the shutdown itself is not covered); where /proc is missing,
	// getrusage's ru_maxrss, which on Linux would also count the harness's
	// own size at the relay's start.
	RelayPeakRSSMB float64 `json:"relay_peak_rss_mb"`
	// PerRelay details each relay process, in start order.
	PerRelay []RelayUsage `json:"per_relay"`
	// DBBackendCPUSeconds is the CPU time of the PostgreSQL backends that
	// served the relays, read from /proc before the relays stop; null when
	// the database is not on this host or /proc is unavailable.
	DBBackendCPUSeconds *float64 `json:"db_backend_cpu_s"`
	// BrokerCPUSeconds is the CPU time the embedded broker process used
	// during the run; null with external brokers.
	BrokerCPUSeconds *float64 `json:"broker_cpu_s"`
	// HostCPUBusy is the share (0 to 1) of all of the host's CPUs that was
	// busy during the run, from /proc/stat; null where unavailable.
	HostCPUBusy *float64 `json:"host_cpu_busy"`
	// CPUs is the number of CPUs HostCPUBusy is a share of.
	CPUs int `json:"cpus"`

	// Table is the outbox table's health before and after the run.
	Table TableStats `json:"table"`

	// Claim is the duration of the relays' claim statement, in ms.
	Claim *Percentiles `json:"claim_ms"`
	// ClaimSource says where Claim comes from: "observer" (the relays'
	// "claimed" events of claims that took rows: the relay's own timing,
	// round trip and reading the rows included; "log" before the relays
	// had an observe file) or "pg_stat_activity"
	// (statements sampled every Config.SampleInterval: query_start to
	// state_change of a backend gone idle after a claim, the server's
	// side only); "" when neither gave any.
	ClaimSource string `json:"claim_source"`
	// Publish and Record are the other phases of a batch as the relays
	// time them, from their "published" events (handing the batch to the
	// sink until it acknowledged) and "recorded" events (the write-backs),
	// in ms; null when there were none.
	Publish *Percentiles `json:"publish_ms"`
	Record  *Percentiles `json:"record_ms"`
	// MarkSent is the duration of the mark-sent statement, in ms, sampled
	// from pg_stat_activity like Claim (rarely caught in burn-down, where
	// the next claim follows at once).
	MarkSent *Percentiles `json:"mark_sent_ms"`
	// BatchCycle is the time between two "recorded" events of one relay
	// when the first batch was full (so no poll wait in between): claim,
	// publish and record of one batch, in ms.
	BatchCycle *Percentiles `json:"batch_cycle_ms"`
	// OldestXactSeconds is the age of the oldest transaction holding a
	// snapshot or a transaction id in the database (other than the
	// harness's sampling one), the largest seen while sampling; null when
	// sampling is off. While
	// such a transaction runs, PostgreSQL can neither remove nor mark dead
	// the index entries of rows updated since it began, so claims visit
	// them all: a run with a large value measured the server's other
	// clients as much as the relay.
	OldestXactSeconds *float64 `json:"oldest_xact_s"`
	// Batches is the number of batches recorded ("recorded" events), over
	// all relays.
	Batches int `json:"batches"`
	// RelayWarnings counts the relays' log lines at level WARN or ERROR,
	// and the observer events the harness did not get (dropped by a relay
	// that could not write them fast enough, or lines that did not
	// decode), which leave the figures above incomplete;
	// RelayWarningMessages counts them by message.
	RelayWarnings        int            `json:"relay_warnings"`
	RelayWarningMessages map[string]int `json:"relay_warning_messages,omitempty"`

	// Sent is the number of rows with status sent at the end (in soak
	// mode, those the janitor had not deleted yet).
	Sent int `json:"sent"`
	// Received is the number of distinct events read from the topic.
	Received int `json:"received"`
	// Duplicates is the number of records whose outbox-event-id had been
	// read before.
	Duplicates int `json:"duplicates"`
	// Missing is the number of events written (committed) but not read
	// from the topic (in steady and soak mode: within Config.Grace after
	// the writers stopped).
	Missing int `json:"missing"`

	// Steady gives what steady mode measures; soak mode fills it too, over
	// the whole run.
	Steady *SteadyStats `json:"steady,omitempty"`
	// Idle gives what only idle mode measures.
	Idle *IdleStats `json:"idle,omitempty"`
	// Soak gives what only soak mode measures: the sample series and the
	// verdicts drawn from it.
	Soak *SoakStats `json:"soak,omitempty"`
}

// RelayUsage is what one relay process used and did.
type RelayUsage struct {
	// ID is its --relay-id.
	ID string `json:"id"`
	// CPUSeconds is its user+system CPU time; PeakRSSMB its peak resident
	// set in MiB.
	CPUSeconds float64 `json:"cpu_s"`
	PeakRSSMB  float64 `json:"peak_rss_mb"`
	// Batches and Claimed count its recorded batches ("recorded" events)
	// and the rows they claimed.
	Batches int `json:"batches"`
	Claimed int `json:"claimed"`
}

// TableStats describe the outbox table before the relays start (after the
// pre-write and VACUUM ANALYZE) and after they exit.
type TableStats struct {
	// DeadTuplesBefore and DeadTuplesAfter are pg_stat_user_tables.n_dead_tup.
	DeadTuplesBefore int64 `json:"dead_tuples_before"`
	DeadTuplesAfter  int64 `json:"dead_tuples_after"`
	// SizeBeforeBytes and SizeAfterBytes are pg_total_relation_size:
	// table, TOAST and indexes.
	SizeBeforeBytes int64 `json:"size_before_bytes"`
	SizeAfterBytes  int64 `json:"size_after_bytes"`
	// Autovacuums is how many times autovacuum processed the table
	// during the run (it lowers DeadTuplesAfter).
	Autovacuums int64 `json:"autovacuums"`
}

// SteadyStats is what steady mode measures besides Result's fields.
type SteadyStats struct {
	// TargetRate is Config.Rate.
	TargetRate int `json:"target_rate"`
	// Latency is receive time minus commit-return time per event, both on
	// the harness's clock, in ms.
	Latency *Percentiles `json:"latency_ms"`
	// Commit is the time of BEGIN, Writer.Write, COMMIT per event, in ms.
	Commit *Percentiles `json:"commit_ms"`
	// LateWrites counts writes that started more than one writer interval
	// after their scheduled time (the schedule is kept: a late writer
	// catches up rather than shifting every later write).
	LateWrites int `json:"late_writes"`
	// MaxLagMS is the largest delay of a write's start behind its schedule.
	MaxLagMS float64 `json:"max_lag_ms"`
	// Burst is the burst of Config.Burst, when there was one.
	Burst *BurstStats `json:"burst,omitempty"`
}

// BurstStats is a burst written on top of steady mode's stream: its
// events, when it committed, how long the relays took to send it, and the
// steady events' latency before, during and after.
type BurstStats struct {
	Events int `json:"events"`
	// AtS is when the burst's transaction committed, in seconds from the
	// start of the steady writes; WriteS is how long it took (BEGIN to
	// COMMIT).
	AtS    float64 `json:"at_s"`
	WriteS float64 `json:"write_s"`
	// DrainS is from the burst's commit to the last of its events marked
	// sent (the database's clock, read after the run).
	DrainS float64 `json:"drain_s"`
	// Before, During and After are the steady events' latency (ms), by
	// when they committed: before the burst's commit, between it and the
	// burst's last sent_at, and after that.
	Before *Percentiles `json:"before_ms"`
	During *Percentiles `json:"during_ms"`
	After  *Percentiles `json:"after_ms"`
}

// IdleStats is what idle mode measures: the database load of relays with
// nothing to do, over the time from the last relay's "started" event to
// SIGTERM.
type IdleStats struct {
	// DBXactPerSecond is the growth of pg_stat_database's xact_commit +
	// xact_rollback for the database, per second, less the harness's own
	// pg_stat_activity readings. Statistics are read with every backend of
	// the harness and the relays closed, so that all they did is reported;
	// still, every other client of the database adds to it.
	DBXactPerSecond float64 `json:"db_xact_per_s"`
	// ClaimsPerSecond is the relays' claim statements per second, counted
	// by sampling pg_stat_activity: an idle relay waits a poll interval
	// after each claim, so with Config.SampleInterval shorter than that
	// none is missed. Null when sampling is off.
	ClaimsPerSecond *float64 `json:"claims_per_s"`
	// StatementsPerSecond is all the relays' statements per second,
	// counted alike.
	StatementsPerSecond *float64 `json:"statements_per_s"`
}

// LevelTolerance is the growth Leveled allows over the last third of a soak
// (1.2: 20%).
const LevelTolerance = 1.2

// ClaimTolerance is the most ClaimP50Ratio may be for ClaimWithin2x.
const ClaimTolerance = 2.0

// SoakStats is what soak mode measures: one SoakSample every
// Config.SampleEvery and verdicts drawn from the series.
//
// The verdicts pick samples by their elapsed_s: "the sample at f" is the
// one whose elapsed_s is nearest to f times the duration. With the
// defaults (10m, a sample every 30s) the samples are at 0, 30, ..., 600 s;
// the half-way sample is at 300 s, the start of the last third at 400 s.
type SoakStats struct {
	// SampleEveryS is Config.SampleEvery in seconds; RetentionS and
	// JanitorIntervalS the relays' --retention and --janitor-interval.
	SampleEveryS     float64 `json:"sample_every_s"`
	RetentionS       float64 `json:"retention_s"`
	JanitorIntervalS float64 `json:"janitor_interval_s"`
	// Autovacuum is the server's autovacuum setting. When it is off,
	// nothing vacuums the table but the harness (VacuumEveryS), so dead
	// tuples and size cannot level off.
	Autovacuum bool `json:"autovacuum"`
	// VacuumEveryS is Config.VacuumEvery in seconds (0: the harness ran no
	// VACUUM); Vacuum the duration of the harness's VACUUM (ANALYZE) runs,
	// in ms (null when none ran).
	VacuumEveryS float64      `json:"vacuum_every_s"`
	Vacuum       *Percentiles `json:"vacuum_ms"`
	// Samples is the series, oldest first. The first is taken when the
	// writers start (its window fields are empty), then one every
	// SampleEveryS, and the last when the writers have stopped.
	Samples []SoakSample `json:"samples"`

	// HalfS is the elapsed_s of the half-way sample; SizeGrowthSecondHalf
	// is the size_bytes of the last sample divided by that of the
	// half-way one (1.0: no growth over the second half).
	HalfS                float64  `json:"half_s"`
	SizeGrowthSecondHalf *float64 `json:"size_growth_second_half"`
	// DeadTuplesHalf and DeadTuplesLast are dead_tuples at the half-way
	// and the last sample. Autovacuum makes dead tuples a saw-tooth
	// (up to autovacuum_naptime, 1 min by default, between its runs), so
	// one sample against another says little; these two are for the
	// record, the trend is the slope and the peaks.
	DeadTuplesHalf int64 `json:"dead_tuples_half"`
	DeadTuplesLast int64 `json:"dead_tuples_last"`
	// DeadTuplesSlopePerMin is the least-squares slope of dead_tuples
	// over the samples of the second half (from the half-way sample on),
	// in dead tuples per minute: near 0 when they level off.
	DeadTuplesSlopePerMin *float64 `json:"dead_tuples_slope_per_min"`
	// ThirdS and LastThirdS are the elapsed_s of the samples at one and
	// two thirds of the duration. The middle third is the samples after
	// ThirdS up to LastThirdS; the last third those after LastThirdS.
	ThirdS     float64 `json:"third_s"`
	LastThirdS float64 `json:"last_third_s"`
	// DeadTuplesPeakMiddleThird and DeadTuplesPeakLastThird are the
	// largest dead_tuples of the middle and the last third.
	DeadTuplesPeakMiddleThird int64 `json:"dead_tuples_peak_middle_third"`
	DeadTuplesPeakLastThird   int64 `json:"dead_tuples_peak_last_third"`
	// SizeLastThirdStart is size_bytes at LastThirdS, SizeLast at the
	// last sample.
	SizeLastThirdStart int64 `json:"size_last_third_start_bytes"`
	SizeLast           int64 `json:"size_last_bytes"`

	// SizeLeveled is SizeLast <= LevelTolerance * SizeLastThirdStart:
	// over the last third the table and its indexes grew by at most 20%.
	SizeLeveled bool `json:"size_leveled"`
	// DeadTuplesLeveled is DeadTuplesPeakLastThird <= LevelTolerance *
	// DeadTuplesPeakMiddleThird: the dead tuples of the last third peaked
	// no more than 20% above those of the middle third. Comparing peaks
	// over thirds (several autovacuum cycles each at the defaults) rather
	// than two samples keeps the saw-tooth out of the verdict.
	DeadTuplesLeveled bool `json:"dead_tuples_leveled"`
	// Leveled is SizeLeveled && DeadTuplesLeveled: the soak target's "table
	// and index size and dead tuples level off instead of growing". False
	// when there are fewer than 4 samples.
	Leveled bool `json:"leveled"`

	// WarmupS is when the table can first be in its steady state: the
	// retention plus one janitor interval (the first rows expire at
	// RetentionS and are deleted at the janitor's next look).
	WarmupS float64 `json:"warmup_s"`
	// ClaimFirstWindowS and ClaimLastWindowS are the windows compared,
	// [from, to] in elapsed seconds: the first window that starts at or
	// after WarmupS, and the last window, each the first or last with
	// claims. Null when there are none.
	ClaimFirstWindowS []float64 `json:"claim_first_window_s"`
	ClaimLastWindowS  []float64 `json:"claim_last_window_s"`
	// ClaimP50Ratio and ClaimP99Ratio are the last window's claim_ms p50
	// and p99 divided by the first window's.
	ClaimP50Ratio *float64 `json:"claim_p50_ratio"`
	ClaimP99Ratio *float64 `json:"claim_p99_ratio"`
	// ClaimWithin2x is ClaimP50Ratio <= ClaimTolerance (2): the soak
	// target's "claim latency at the end within 2x of the start".
	ClaimWithin2x bool `json:"claim_within_2x"`
}

// SoakSample is one reading of a soak. The table figures are read at the
// sample's time; the window figures (claim_ms, latency_ms, written,
// received, janitor_runs) cover the time since the previous sample.
type SoakSample struct {
	// ElapsedS is the time since the writers started.
	ElapsedS float64 `json:"elapsed_s"`
	// SizeBytes is the outbox table's total size, TableBytes +
	// IndexesBytes, as pg_total_relation_size counts it: heap, TOAST and
	// indexes. TableBytes is pg_table_size (heap, TOAST, free
	// space and visibility maps; no indexes) and IndexesBytes
	// pg_indexes_size.
	SizeBytes    int64 `json:"size_bytes"`
	TableBytes   int64 `json:"table_bytes"`
	IndexesBytes int64 `json:"indexes_bytes"`
	// LiveTuples and DeadTuples are pg_stat_user_tables.n_live_tup and
	// n_dead_tup, read after pg_stat_force_next_flush() (the relays'
	// backends report theirs at least once a second while busy).
	LiveTuples int64 `json:"live_tuples"`
	DeadTuples int64 `json:"dead_tuples"`
	// Autovacuums is pg_stat_user_tables.autovacuum_count: autovacuum's
	// runs on the table since it was created. Vacuums is vacuum_count:
	// the VACUUMs run by hand, the harness's included (one before the
	// relays start, and those of Config.VacuumEvery).
	//
	// On a partitioned table every figure is the sum over the partitions
	// that exist at the sample (a dropped partition takes its counts
	// with it), and Partitions counts them, the DEFAULT one included.
	Autovacuums int64 `json:"autovacuums"`
	Vacuums     int64 `json:"vacuums"`
	Partitions  int64 `json:"partitions,omitempty"`
	// Pending, Processing and Sent count the rows by status, each on its
	// partial index (pending_idx, processing_idx, sent_idx) under a 1s
	// statement_timeout; null when it ran out. Failed rows have no index
	// and are not counted (counting them would scan the table, pruning
	// its pages, which changes what is measured).
	Pending    *int64 `json:"pending"`
	Processing *int64 `json:"processing"`
	Sent       *int64 `json:"sent"`
	// Janitor is the retention job's row of <table>_jobs; null if it is
	// missing.
	Janitor *JanitorJob `json:"janitor"`
	// OldestXactS is the age of the oldest transaction holding a snapshot
	// or a transaction id in the database (other than the harness's
	// reading one), the largest seen in the window: by this sample, and
	// by the pg_stat_activity sampler (every Config.SampleInterval, 1s by
	// default in soak mode), which catches a transaction idle between
	// statements when it runs one. While such a transaction runs, neither
	// vacuum nor page pruning can remove the dead tuples of rows changed
	// since it began, nor can index scans mark their entries dead.
	OldestXactS float64 `json:"oldest_xact_s"`

	// Claim is the duration of the relays' claims that took rows and
	// ended in the window ("claimed" events; an empty claim is a poll);
	// null when there were none.
	Claim *Percentiles `json:"claim_ms"`
	// Latency is the end-to-end latency (commit's return to arrival) of
	// the events that arrived in the window; null when none did.
	Latency *Percentiles `json:"latency_ms"`
	// Written and Received count the events committed and first received
	// in the window.
	Written  int `json:"written"`
	Received int `json:"received"`
	// JanitorRuns and JanitorDeleted count the relays' retention runs
	// ("janitor_ran" events: runs that held the job) in the window and
	// the rows they deleted.
	JanitorRuns    int   `json:"janitor_runs"`
	JanitorDeleted int64 `json:"janitor_deleted"`
}

// JanitorJob is the retention job's row of <table>_jobs
// (docs/architecture.md#reading-the-jobs-table).
type JanitorJob struct {
	// TotalDeleted is total_deleted: rows deleted by every run.
	TotalDeleted int64 `json:"total_deleted"`
	// LastDeleted is last_deleted: rows deleted by the latest run so far;
	// null before the first run.
	LastDeleted *int64 `json:"last_deleted"`
	// LockedBy is the token of the run holding the job, or of the last
	// one; LockedUntil the end of its lease, or of the last run.
	LockedBy    *string    `json:"locked_by"`
	LockedUntil *time.Time `json:"locked_until"`
	// LastFinishedAt is when the latest complete run finished.
	LastFinishedAt *time.Time `json:"last_finished_at"`
}

// Percentiles summarise a sample, in milliseconds (nearest rank).
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// percentilesOf returns the percentiles of ms, or nil when it is empty. It
// sorts ms.
func percentilesOf(ms []float64) *Percentiles {
	if len(ms) == 0 {
		return nil
	}
	slices.Sort(ms)
	return &Percentiles{N: len(ms), P50: rank(ms, 0.50), P95: rank(ms, 0.95), P99: rank(ms, 0.99), Max: ms[len(ms)-1]}
}

// rank is the nearest-rank percentile p of sorted.
func rank(sorted []float64, p float64) float64 {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ratio returns a/b, or nil when b is not positive.
func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	r := a / b
	return &r
}

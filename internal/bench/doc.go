// Package bench is the benchmark harness behind the relay-bench command
// (cmd/relay-bench): it measures
// real relay processes against a real PostgreSQL and a sink (Kafka by
// default; any sink of internal/sinks that can be read back with
// Config.Sink), and the SQL-only ceiling of the relay's lifecycle on the
// same server in the same invocation, so that figures can be quoted as
// ratios on a noisy machine.
//
// # What runs where
//
//   - The relays are child processes of the relay binary
//     (Config.RelayBinary: `relay run --observe-file /dev/fd/3 --log-format json ...`), one
//     per replica, so that each one's CPU time and peak RSS come from the
//     kernel (getrusage after SIGTERM). Each writes its observer events
//     (relay.Event, as JSON lines: see cmd/relay/observe.go) into a pipe
//     the harness reads: a relay is ready at its "started" line (its
//     first claim ran), and the events say what it did. Its standard
//     error is read only for warnings and errors, and for the last lines
//     shown when it fails. Their connections carry the application_name
//     "relay-bench <schema> bench-r<i>", which is how the harness finds
//     their backends in pg_stat_activity.
//   - The sink is one of the registry's (internal/sinks), read back with
//     its Reader: Prepare makes a run's destination, Read reads the events
//     back, each event's id and arrival time recorded. The sink's flags (Config.SinkURL as its
//     --<sink>-url, Config.Brokers as --kafka-brokers, or what the reader
//     started: a webhook receiver in the harness's process on a loopback
//     port) reach the relays in their environment (OUTBOX_NATS_URL, ...).
//     A sink whose broker can run embedded (sinks.Embedder: Kafka's kfake)
//     and that Config points at no server gets it in a process of its own
//     (`relay-bench broker`, Config.BrokerBinary; see ServeBroker),
//     stopped at the end.
//   - Each run (a mode with one relay count) drops and recreates
//     Config.Schema, migrates it with package migrations, and uses a fresh
//     topic, deleted afterwards.
//
// # Modes
//
// burn-down pre-writes Config.Events events with Writer.WriteBatch (COPY,
// 1,000 per statement), runs VACUUM ANALYZE, reads the database clock and
// starts the relays. The run ends when no row is pending or processing,
// asked of the two partial indexes once the relays report every row sent,
// or every second before; the drain time is the
// last sent_at minus that clock reading. The topic is then read back
// whole: duplicates are records whose outbox-event-id was seen before.
//
// steady starts a consumer (the sink's Read, following) and the relays,
// then Config.Writers writers write
// Config.Rate events per second in all, each event in its own transaction
// (BEGIN, Writer.Write, COMMIT), on a fixed schedule that a slow commit
// does not shift (late writes are counted). Latency is the event's
// arrival time minus its COMMIT's return, both on this process's clock.
//
// idle runs the relays on an empty table for Config.Duration and reports
// the transactions per second of the database and the relays' claim
// statements per second.
//
// soak writes like steady for a long Config.Duration (10 minutes by
// default) with the relays' retention janitor on (Config.Retention,
// JanitorInterval and JanitorBatch become the relays' --retention,
// --janitor-interval and --janitor-batch). When the writers start, every
// Config.SampleEvery after, and once they stopped, it reads on one
// connection: pg_table_size and pg_indexes_size (their sum is the size);
// n_live_tup, n_dead_tup and autovacuum_count of pg_stat_user_tables
// after pg_stat_force_next_flush(); the pending, processing and sent rows,
// each counted on its partial index under a 1s statement_timeout; the
// retention job's row of <table>_jobs; and the oldest transaction. After
// the run, each sample gets the figures of its window (the time since the
// previous sample): the durations of the relays' claims that took rows and
// ended in it ("claimed" events), the end-to-end latency of the events
// that arrived in it, and the relays' retention runs ("janitor_ran"
// events). SoakStats draws the verdicts: size growth
// over the second half, the dead tuples' trend, claim latency at the end
// against the start, and Leveled.
//
// The SQL ceiling (burn-down only, ceiling.go) is the reference the
// relay is measured against: the statements a lease relay must run, with
// no relay and no broker, on an outbox table made by package migrations
// in a schema of its own (the relay's columns, indexes and triggers):
// fill Config.CeilingRows rows, VACUUM ANALYZE, then clients looping a
// claim UPDATE of one batch followed by a mark-sent UPDATE (or a DELETE),
// each statement its own transaction, as under pgbench.
// Result.CeilingRatio divides the burn-down throughput by the mark_sent
// figure at one client.
//
// The sink ceiling (burn-down) publishes Config.SinkCeilingEvents events
// like burn-down's with the sink's publisher (the one the relays run,
// opened from the same flags) to a fresh destination, in batches of
// BatchSize, as many at a time as a relay has workers by default, with no
// database. Result.SinkCeilingRatio divides the burn-down throughput by
// it.
//
// # MySQL and MariaDB
//
// With a mysql:// (or mariadb://) Config.DatabaseURL, burn-down runs on
// MySQL 8 or MariaDB 10.6+ (mysql.go, ceiling_mysql.go,
// burndown_mysql.go); the other modes, HoldSnapshot and NoNotify are
// refused with a *ConfigError, since they read
// PostgreSQL's statistics views or exist on PostgreSQL only. Config.Schema
// is then a database, which Run drops and recreates (it must not be the
// URL's database; Run marks the databases it makes with a table,
// relay_bench, and drops no other). The relays run as on PostgreSQL, with
// the URL in OUTBOX_DATABASE_URL and --schema naming the database. The
// events are pre-written by the Writer through outbox.FromMySQL, 1,000 per
// transaction (one multi-row INSERT), and ANALYZE TABLE stands for VACUUM
// ANALYZE; the drain time runs from UTC_TIMESTAMP(6) just before the
// relays start to the last sent_at. Without pg_stat_activity there is no
// sampling (Claim comes from the relays' events) and no backend CPU, and
// TableStats has only the sizes (information_schema after ANALYZE TABLE).
//
// The MySQL ceiling runs the relay's own statements (those of
// relay/internal/mysqlstore/sql, compared by a test): a READ COMMITTED claim
// transaction (claim_due.sql's SELECT ... FOR UPDATE SKIP LOCKED, reading
// the rows' sizes, then claim_lease.sql's UPDATE of the ids,
// claim_read.sql's SELECT of their payloads, COMMIT) and
// mark_sent.sql, with the relay's session settings
// (mysqldsn.ParseURL: interpolated parameters, UTC). It measures two
// lifecycles, as the relay runs one or the other by batch size:
// "mark_sent" (the mark-sent in a transaction of its own, as with batches
// of 500 rows or more) and "mark_sent_in_claim" (each batch marked sent in
// the next claim's transaction). The rows are written once into a copy of
// the table and copied in before each lifecycle. Result.CeilingRatio
// divides by the faster of the two at one client; CeilingResult.Phases
// says which statement takes the time.
//
// # Where a batch's time goes
//
// Result.Claim, Publish and Record come from the relays' observer events,
// one per phase of a batch: "claimed" (the claim statements that took
// rows), "published" and "recorded", each with the relay's own timing of
// its phase. A run whose claims took no rows (idle mode) gets a Claim from
// sampling pg_stat_activity every Config.SampleInterval instead: a
// backend that went idle after a claim shows the claim's query_start and
// state_change. The sampler also records the oldest transaction of the
// database (Result.OldestXactSeconds), which explains most bad runs on a
// shared server. Sampling takes a little CPU from the server; a negative
// SampleInterval turns it off.
//
// # JSON
//
// Report encodes to the output of `relay-bench --json`. Field names are
// stable; each is documented on Report, Settings, CeilingResult,
// SinkCeilingResult, Result,
// TableStats, SteadyStats, IdleStats, SoakStats, SoakSample, JanitorJob
// and Percentiles. Durations are
// milliseconds (fields ending in _ms) or seconds (_s), sizes bytes
// (_bytes) or MiB (_mb); a measurement that was not available is null.
package bench

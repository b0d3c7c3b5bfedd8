package relay

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// Config configures a Relay. Zero fields take the documented defaults;
// DefaultConfig returns them.
type Config struct {
	// Table is the outbox table. Defaults to "public"."outbox".
	Table outbox.Table
	// ID identifies this replica: each claim writes "<ID>#<n>" to
	// locked_by. Defaults to host-pid-random.
	ID string
	// BatchSize is the most rows one claim takes. Claims adapt between
	// BatchMin and BatchSize: they start at BatchMin, double while claims
	// come back full (a backlog) and halve when a claim comes back less
	// than a quarter full, so a backlog drains in big batches and a lightly
	// loaded relay publishes small, quick ones. Between 1 and 10000.
	// Defaults to 1000.
	BatchSize int
	// BatchMin is the smallest claim of the adaptive batch size; BatchMin
	// equal to BatchSize fixes the size. Defaults to DefaultBatchMin (100),
	// or BatchSize when that is smaller.
	BatchMin int
	// BatchBytes bounds a batch by its rows' bytes (payloads, keys and
	// headers, measured by the database before it sends them): a claim
	// stops at the row that reaches BatchBytes, and takes at least one
	// row; a batch does not grow past the rows that fit, going by the last
	// batch's mean row, and one that reached BatchBytes makes the next
	// smaller in proportion, down to BatchMin. Defaults to 4194304 (4 MiB).
	BatchBytes int
	// MaxEventBytes is the largest event the relay reads, counting its
	// payload, key and headers. The claim leaves a larger row's payload,
	// key and headers in the database and the row fails with its size as
	// the reason: a row written by plain SQL past the Writer's
	// MaxPayloadBytes cannot run the relay out of memory. Set it to at
	// least the largest Writer's MaxPayloadBytes. Defaults to 16777216
	// (16 MiB).
	MaxEventBytes int
	// Lease is how long a claim stays valid without renewal; another
	// replica may take the rows after it ends. Defaults to 30s.
	Lease time.Duration
	// PollInterval is the wait after a batch that was not full. A full batch
	// is followed by the next claim at once. Defaults to 500ms.
	PollInterval time.Duration
	// PollMin applies when the relay does not listen (NoListen, or on
	// MySQL, which has no notifications): it then
	// polls adaptively, PollMin after a claim that found rows, the wait
	// doubling with each claim that found none, up to PollInterval. It
	// follows a stream of events within about PollMin and costs an idle
	// database a claim per PollInterval. Defaults to 5ms, or PollInterval
	// when that is shorter.
	PollMin time.Duration
	// Workers is how many unordered batches a relay has in flight: each
	// worker claims, publishes and records a batch of its own, so the
	// database works on one batch while another is being published or
	// recorded. The workers share wake-ups: a notification or a poll
	// starts one claim, not one per worker, and a full batch invites
	// another worker to claim the next one. Ordered topics have loops of
	// their own (Ordering.Loops). Defaults to 2; at most 64.
	Workers int
	// Claim is how an unordered claim holds its rows while they are
	// published: ClaimLease (the default) or ClaimLock; see ClaimMode and
	// docs/architecture.md#claim-modes. Rows of ordered topics are always
	// leased.
	Claim ClaimMode
	// NoListen turns off waking by notification. By default the relay
	// LISTENs on the table's channel (outbox.Table.Channel), which inserts
	// notify at commit (migration 003), and claims at once instead of
	// waiting for PollInterval; polling remains the fallback, for delayed
	// events and retries, and while the listening connection is down.
	NoListen bool
	// MaxAttempts is how many times a row is claimed before a transient
	// failure marks it failed. Defaults to 10.
	MaxAttempts int
	// BackoffMin is the retry delay after the first failed attempt; it
	// doubles per attempt, with ±50% jitter. Defaults to 1s.
	BackoffMin time.Duration
	// BackoffMax caps the retry delay, at most 24h. Defaults to 5m.
	BackoffMax time.Duration
	// PublishTimeout bounds one Publish call. While it runs the lease is
	// extended, so a slow but live publish keeps its rows, and a stuck one
	// gives them up after this long. Defaults to 1m.
	PublishTimeout time.Duration
	// ShutdownTimeout is how long a publish in flight may finish after Run's
	// context is cancelled before its rows are released. Defaults to 10s.
	ShutdownTimeout time.Duration
	// OutageBackoffMin and OutageBackoffMax bound the wait between attempts
	// while the database is unreachable, and between the one-row batches
	// that probe a sink that cannot be probed otherwise (one that is not a
	// publishers.Prober); the wait doubles from the first to the second.
	// OutageBackoffMin defaults to 100ms.
	OutageBackoffMin time.Duration
	// OutageBackoffMax is at most 24h. Defaults to 30s.
	OutageBackoffMax time.Duration
	// ProbeInterval is the wait between probes of a sink that is down and
	// implements publishers.Prober (the Kafka sink does: a metadata request
	// that publishes nothing). It bounds how long after the sink answers
	// again the relay resumes, however long the outage. Between 1ms and 1m.
	// Defaults to 250ms.
	ProbeInterval time.Duration
	// Ordering turns on per-key ordered delivery for some topics; see
	// Ordering and docs/ordering.md. The zero value delivers every event
	// unordered.
	Ordering Ordering
	// Retention is how long sent rows are kept (for replay, audit and
	// duplicate suppression by dedup key) before the retention janitor
	// deletes them, counted from sent_at. At most 100 years. Failed and
	// unfinished rows are never deleted. Defaults to 168h (7 days).
	Retention time.Duration
	// KeepSent turns the retention janitor off: sent rows stay until
	// someone deletes them. By default every replica runs the janitor and
	// the jobs table (<table>_jobs, migration 004) lets one of them do the
	// work per JanitorInterval.
	KeepSent bool
	// JanitorInterval is how often the retention job may run, cluster-wide:
	// a run schedules the next one this long after it finished, and each
	// replica looks about this often whether the job is due. Between 10ms
	// and 24h. Defaults to 1m.
	JanitorInterval time.Duration
	// JanitorBatch is the most rows one DELETE of the janitor removes;
	// between batches it renews its lease on the job. Between 1 and
	// 100000. Defaults to 1000.
	JanitorBatch int
	// NoVacuum leaves vacuuming the table to autovacuum. By default the
	// janitor runs VACUUM (SKIP_LOCKED, ANALYZE, TRUNCATE false) on the table
	// after each retention run that deleted rows, on the replica that ran it,
	// so that a table autovacuum neglects does not bloat. That takes a role
	// that owns the table; with any other role the janitor logs one warning
	// and leaves it to autovacuum.
	NoVacuum bool
	// Logger receives structured logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told what the relay does as it happens:
	// claims, publishes, outcomes, leases lost, outages, janitor runs and
	// shard hand-backs (see Observer). Defaults to none.
	Observer Observer
}

// ClaimMode says how a claim holds its rows while they are published.
type ClaimMode string

// Claim modes.
const (
	// ClaimLease writes a lease on the rows (status processing, locked_by,
	// locked_until and the attempt) and commits, then records the outcome
	// in a second statement fenced by the lease. Two row versions per
	// event; anyone can read in the table who holds which rows, and an
	// attempt is counted even if the relay dies while publishing.
	ClaimLease ClaimMode = "lease"
	// ClaimLock locks the rows (SELECT ... FOR UPDATE SKIP LOCKED) in a
	// transaction that stays open while they are published, and records
	// the outcome and the attempt in the same transaction. One row version
	// per event instead of two. The lease is PostgreSQL's
	// idle_in_transaction_session_timeout, set to Lease and renewed while
	// the publish makes progress: a frozen relay's session is ended and its
	// rows are free again; a dead relay's rows are free at once. An attempt
	// cut short by a crash is not counted, and each worker holds a
	// connection for the whole batch.
	ClaimLock ClaimMode = "lock"
)

// DefaultConfig returns the defaults New gives a Config's zero fields,
// filled in. It is the one place they are written: relay run's flags, their
// --help and the documentation tables are checked against it. Five fields
// stay zero because New derives them when it starts: ID (host-pid-random,
// one per process), PollMin (DefaultPollMin, or PollInterval when that is
// shorter), BatchMin (DefaultBatchMin, or BatchSize when that is smaller),
// Ordering.ShardBudget (DefaultShardBudgetBatches times BatchMin) and
// Logger (slog.Default()); so a copy whose PollInterval or BatchSize is
// changed keeps them in step. Ordering.Topics is empty:
// ordering is off.
func DefaultConfig() Config {
	return Config{
		Table:            outbox.Table{}.WithDefaults(),
		BatchSize:        1000,
		BatchBytes:       4 << 20,
		MaxEventBytes:    16 << 20,
		Lease:            30 * time.Second,
		PollInterval:     500 * time.Millisecond,
		Workers:          2,
		Claim:            ClaimLease,
		MaxAttempts:      10,
		BackoffMin:       time.Second,
		BackoffMax:       5 * time.Minute,
		PublishTimeout:   time.Minute,
		ShutdownTimeout:  10 * time.Second,
		OutageBackoffMin: 100 * time.Millisecond,
		OutageBackoffMax: 30 * time.Second,
		ProbeInterval:    250 * time.Millisecond,
		Ordering:         Ordering{Shards: 16, Loops: DefaultOrderedLoops, HeadOfLine: HeadOfLineWait},
		Retention:        7 * 24 * time.Hour,
		JanitorInterval:  time.Minute,
		JanitorBatch:     1000,
	}
}

// Defaults that New derives from other fields (see DefaultConfig).
const (
	// DefaultPollMin is PollMin's default, or PollInterval when that is
	// shorter.
	DefaultPollMin = 5 * time.Millisecond
	// DefaultBatchMin is BatchMin's default, or BatchSize when that is
	// smaller.
	DefaultBatchMin = 100
	// DefaultOrderedLoops is Ordering.Loops' default. An ordered loop
	// waits for each batch's write-back before it claims the next (the
	// next claim must see the outcome), so more loops drain a backlog
	// faster on one replica; but under a steady load each loop leases,
	// claims and hands back shards for a few events at a time, which
	// costs the database more (docs/ordering.md#serving-a-shard).
	DefaultOrderedLoops = 2
	// DefaultShardBudgetBatches is Ordering.ShardBudget's default in
	// batches: ShardBudget defaults to this times BatchMin.
	DefaultShardBudgetBatches = 10
)

// withDefaults fills zero fields from DefaultConfig and the derived
// defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Table = c.Table.WithDefaults()
	if c.ID == "" {
		c.ID = newReplicaID()
	}
	setDefault(&c.BatchSize, d.BatchSize)
	setDefault(&c.BatchMin, min(DefaultBatchMin, c.BatchSize))
	setDefault(&c.BatchBytes, d.BatchBytes)
	setDefault(&c.MaxEventBytes, d.MaxEventBytes)
	setDefault(&c.Workers, d.Workers)
	setDefault(&c.Lease, d.Lease)
	setDefault(&c.PollInterval, d.PollInterval)
	setDefault(&c.PollMin, min(DefaultPollMin, c.PollInterval))
	setDefault(&c.MaxAttempts, d.MaxAttempts)
	setDefault(&c.BackoffMin, d.BackoffMin)
	setDefault(&c.BackoffMax, d.BackoffMax)
	setDefault(&c.PublishTimeout, d.PublishTimeout)
	setDefault(&c.ShutdownTimeout, d.ShutdownTimeout)
	setDefault(&c.OutageBackoffMin, d.OutageBackoffMin)
	setDefault(&c.OutageBackoffMax, d.OutageBackoffMax)
	setDefault(&c.ProbeInterval, d.ProbeInterval)
	setDefault(&c.Retention, d.Retention)
	setDefault(&c.JanitorInterval, d.JanitorInterval)
	setDefault(&c.JanitorBatch, d.JanitorBatch)
	if c.Claim == "" {
		c.Claim = d.Claim
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Ordering.enabled() {
		setDefault(&c.Ordering.Shards, d.Ordering.Shards)
		setDefault(&c.Ordering.Loops, d.Ordering.Loops)
		setDefault(&c.Ordering.ShardBudget, DefaultShardBudgetBatches*c.BatchMin)
		if c.Ordering.HeadOfLine == "" {
			c.Ordering.HeadOfLine = d.Ordering.HeadOfLine
		}
	}
	return c
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// ConfigError reports an invalid Config field.
type ConfigError struct {
	// Field is the Config field name, e.g. "BatchSize".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string { return "relay: invalid " + e.Field + ": " + e.Reason }

// maxBackoff bounds BackoffMax and OutageBackoffMax. Far larger values
// overflowed the ±50% jitter into negative delays: retries at once.
const maxBackoff = 24 * time.Hour

// Bounds of the retention settings. The cut-off now() - Retention must stay
// a valid timestamp; KeepSent is the way to keep rows for ever.
const (
	maxRetention       = 100 * 365 * 24 * time.Hour
	minJanitorInterval = 10 * time.Millisecond
	maxJanitorInterval = 24 * time.Hour
	maxJanitorBatch    = 100000
)

// Validate reports the first invalid field of c, with the defaults New
// fills in applied, as a *ConfigError. New runs it; a command line can run
// it before it has a pool and a publisher.
func (c Config) Validate() error { return c.withDefaults().validate() }

// validate checks a defaulted config; the error is a *ConfigError.
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if err := c.Table.Validate(); err != nil {
		return bad("Table", "%v", err)
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return bad("BatchSize", "%d is not between 1 and 10000", c.BatchSize)
	case c.BatchMin < 1 || c.BatchMin > c.BatchSize:
		return bad("BatchMin", "%d is not between 1 and BatchSize (%d)", c.BatchMin, c.BatchSize)
	case c.BatchBytes < 1:
		return bad("BatchBytes", "%d is not positive", c.BatchBytes)
	case c.MaxEventBytes < 1:
		return bad("MaxEventBytes", "%d is not positive", c.MaxEventBytes)
	case c.Workers < 1 || c.Workers > 64:
		return bad("Workers", "%d is not between 1 and 64", c.Workers)
	case c.Claim != ClaimLease && c.Claim != ClaimLock:
		return bad("Claim", "%q is neither %q nor %q", c.Claim, ClaimLease, ClaimLock)
	case c.Lease < time.Second:
		return bad("Lease", "%v is shorter than 1s", c.Lease)
	case c.PollInterval < time.Millisecond:
		return bad("PollInterval", "%v is shorter than 1ms", c.PollInterval)
	case c.PollMin < time.Millisecond || c.PollMin > c.PollInterval:
		return bad("PollMin", "%v is not between 1ms and PollInterval (%v)", c.PollMin, c.PollInterval)
	case c.MaxAttempts < 1:
		return bad("MaxAttempts", "%d is less than 1", c.MaxAttempts)
	case c.BackoffMin <= 0:
		return bad("BackoffMin", "%v is not positive", c.BackoffMin)
	case c.BackoffMax < c.BackoffMin:
		return bad("BackoffMax", "%v is less than BackoffMin %v", c.BackoffMax, c.BackoffMin)
	case c.BackoffMax > maxBackoff:
		return bad("BackoffMax", "%v is longer than %v", c.BackoffMax, maxBackoff)
	case c.PublishTimeout <= 0:
		return bad("PublishTimeout", "%v is not positive", c.PublishTimeout)
	case c.ShutdownTimeout <= 0:
		return bad("ShutdownTimeout", "%v is not positive", c.ShutdownTimeout)
	case c.OutageBackoffMin <= 0:
		return bad("OutageBackoffMin", "%v is not positive", c.OutageBackoffMin)
	case c.OutageBackoffMax < c.OutageBackoffMin:
		return bad("OutageBackoffMax", "%v is less than OutageBackoffMin %v", c.OutageBackoffMax, c.OutageBackoffMin)
	case c.OutageBackoffMax > maxBackoff:
		return bad("OutageBackoffMax", "%v is longer than %v", c.OutageBackoffMax, maxBackoff)
	case c.ProbeInterval < time.Millisecond || c.ProbeInterval > time.Minute:
		return bad("ProbeInterval", "%v is not between 1ms and 1m", c.ProbeInterval)
	case c.Retention <= 0:
		return bad("Retention", "%v is not positive", c.Retention)
	case c.Retention > maxRetention:
		return bad("Retention", "%v is longer than 100 years", c.Retention)
	case c.JanitorInterval < minJanitorInterval || c.JanitorInterval > maxJanitorInterval:
		return bad("JanitorInterval", "%v is not between %v and %v", c.JanitorInterval, minJanitorInterval, maxJanitorInterval)
	case c.JanitorBatch < 1 || c.JanitorBatch > maxJanitorBatch:
		return bad("JanitorBatch", "%d is not between 1 and %d", c.JanitorBatch, maxJanitorBatch)
	case len(c.ID) > 200:
		return bad("ID", "%d bytes, more than 200", len(c.ID))
	case !utf8.ValidString(c.ID) || strings.ContainsRune(c.ID, 0):
		// locked_by is text: every claim would fail.
		return bad("ID", "%q is not valid UTF-8 without NUL bytes", c.ID)
	}
	return c.Ordering.validate()
}

// NewReplicaID returns an ID of the form New gives a Config without one:
// host-pid-random, unique per process start. relay run takes one before
// it connects, to name its database sessions after the replica.
func NewReplicaID() string { return newReplicaID() }

// newReplicaID returns host-pid-random, unique per process start.
func newReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

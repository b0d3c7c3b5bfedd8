package relay

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/publishers"
	"github.com/outboxrelay/outboxrelay/relay/internal/mysqlstore"
	"github.com/outboxrelay/outboxrelay/relay/internal/pgstore"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Relay moves committed outbox rows to a publishers.Publisher. Create it with
// New and start it with Run; several Relays (in one process or many) may
// serve the same table.
type Relay struct {
	cfg    Config
	prober publishers.Prober // pub, when it can be probed
	store  store.Store       // every statement, on the caller's pool or database
	shards store.Shards      // ordered delivery's statements; nil unless ordered topics are on
	log    *slog.Logger
	tokens *tokens // numbers claims (locked_by)
	bell   *bell   // rung when an insert into the table commits
	turns  *turns  // shares wake-ups among the unordered workers
	// listener wakes the loops on notifications; nil when the relay only
	// polls (NoListen, MySQL).
	listener *listener

	// The claim strategies (claim.go): ProcessBatch's, Run's workers' and
	// ClaimLock's.
	leases *leaseClaims
	stream *streamClaims
	locks  lockClaims

	// The maintenance services (retention.go, partitions.go).
	retention  *retention
	partitions *partitionManager

	sink *breaker  // the sink: up, down since when, or on trial (outage.go)
	pipe *pipeline // a batch's claim, publish and write-back
	// sizes is the unordered workers' adaptive batch size, orderedSizes the
	// ordered loop's (batch_size.go).
	sizes, orderedSizes *batchSizer
	live                *liveness // the claim loops' progress, for Liveness
}

// New returns a Relay that reads pool and publishes to pub. It does not
// touch the database; Run checks the schema. The caller keeps ownership of
// pool and pub and closes them after Run returns.
func New(pool *pgxpool.Pool, pub publishers.Publisher, cfg Config) (*Relay, error) {
	if pool == nil || pub == nil {
		return nil, errors.New("relay: pool and publisher are required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st := pgstore.New(pool, pgstore.Config{Table: cfg.Table, Lease: cfg.Lease, Bounds: claimBytesOf(cfg), Topics: cfg.Ordering.Topics, Shards: cfg.Ordering.Shards})
	return newRelay(st, pub, cfg, cfg.Table.String()), nil
}

// ErrUnsupported is returned, wrapped, for what the relay offers on
// PostgreSQL only (lock claims, partitioned tables)
// when it runs on another database.
var ErrUnsupported = errors.New("not supported on this database")

// NewMySQL returns a Relay that reads the outbox table of a MySQL 8.0 or
// MariaDB 10.6 (or later) database through db, a go-sql-driver/mysql pool
// opened with parseTime=true (docs/mysql.md), and publishes to pub. The
// relay's promises are New's, ordered topics included once the table is
// prepared (docs/ordering.md#mysql-and-mariadb); lock claims, which only
// PostgreSQL offers, are refused with an error wrapping ErrUnsupported.
// It does not touch
// the database; Run checks the server and the schema. The caller keeps
// ownership of db and pub.
func NewMySQL(db *sql.DB, pub publishers.Publisher, cfg Config) (*Relay, error) {
	if db == nil || pub == nil {
		return nil, errors.New("relay: database and publisher are required")
	}
	// No schema names the connection's database: the default schema,
	// PostgreSQL's "public", would name a database called public.
	schema := cfg.Table.Schema
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Table.Schema = schema
	if cfg.Claim == ClaimLock {
		return nil, fmt.Errorf("relay: lock claims on MySQL: %w", ErrUnsupported)
	}
	name := cfg.Table.Name
	if schema != "" {
		name = schema + "." + name
	}
	return newRelay(mysqlstore.New(db, mysqlstore.Config{Table: cfg.Table, Lease: cfg.Lease, Bounds: claimBytesOf(cfg),
		Topics: cfg.Ordering.Topics, Shards: cfg.Ordering.Shards}), pub, cfg, name), nil
}

// newRelay returns the relay of cfg (defaults applied, valid) on st,
// with what st offers beyond store.Store. table names the table in logs.
func newRelay(st store.Store, pub publishers.Publisher, cfg Config, table string) *Relay {
	r := &Relay{
		cfg:    cfg,
		store:  st,
		log:    cfg.Logger.With("relay_id", cfg.ID, "table", table),
		bell:   newBell(),
		turns:  newTurns(),
		live:   newLiveness(cfg),
		tokens: newTokens(cfg.ID),
	}
	r.pipe = &pipeline{cfg: cfg, pub: pub, obs: cfg.Observer, store: st, log: r.log, tokens: r.tokens, keyBatches: keyBatches(pub)}
	r.leases = &leaseClaims{p: r.pipe}
	r.stream = newStreamClaims(r.leases, newSentBatching(r.pipe, sentBatchWait), r.turns)
	if shards, ok := st.(store.Shards); ok && cfg.Ordering.enabled() {
		r.shards = shards
		if cfg.Ordering.allTopics() {
			r.stream.dueKeyless = shards.DueKeyless
		}
	}
	if locks, ok := st.(store.LockClaims); ok {
		r.locks = lockClaims{db: locks, lease: cfg.Lease}
	}
	r.sizes = newBatchSizer(r.cfg.BatchMin, r.cfg.BatchSize, r.cfg.BatchBytes)
	r.orderedSizes = newBatchSizer(r.cfg.BatchMin, r.cfg.BatchSize, r.cfg.BatchBytes)
	wake := func() { // an insert committed, or the sink answers again
		r.bell.ring()
		r.turns.signal()
	}
	r.sink = newBreaker(cfg, r.log, r.store.CountDue, r.pipe.observe, wake)
	r.pipe.sink = r.sink
	parts, _ := st.(store.Partitions)
	vacuums, _ := st.(store.Vacuumer)
	r.retention = &retention{cfg: cfg, store: st, parts: parts, vacuums: vacuums, log: r.log, tokens: r.tokens, observe: r.pipe.observe}
	r.partitions = &partitionManager{cfg: cfg, store: st, parts: parts, log: r.log, tokens: r.tokens}
	if db, ok := st.(store.Listener); ok && !cfg.NoListen { // MySQL has no LISTEN/NOTIFY: it polls
		r.listener = &listener{db: db, backoffMin: cfg.OutageBackoffMin, backoffMax: cfg.OutageBackoffMax, log: r.log, wake: wake}
	}
	r.prober, _ = pub.(publishers.Prober)
	return r
}

// ID returns the replica id. Each claim writes "<ID>#<n>" to locked_by, n
// numbering the replica's claims from a random start, so that a write-back
// is fenced by the claim, not only by the replica.
func (r *Relay) ID() string { return r.cfg.ID }

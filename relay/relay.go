package relay

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/publishers"
)

// Relay moves committed outbox rows to a publishers.Publisher. Create it with
// New and start it with Run; several Relays (in one process or many) may
// serve the same table.
type Relay struct {
	cfg    Config
	pub    publishers.Publisher
	prober publishers.Prober // pub, when it can be probed
	obs    Observer          // cfg.Observer
	store  store             // every statement, on the caller's pool or database
	pg     *pgStore          // store on PostgreSQL, for what only it offers; nil on MySQL
	log    *slog.Logger
	seq    atomic.Uint64 // numbers claims, for their tokens
	bell   *bell         // rung when an insert into the table commits
	turns  *turns        // shares wake-ups among the unordered workers

	// The claim strategies (claim.go): ProcessBatch's, Run's workers' and
	// ClaimLock's.
	leases *leaseClaims
	stream *streamClaims
	locks  lockClaims

	vacuumDenied atomic.Bool // the role may not VACUUM the table: the janitor warned once and leaves it to autovacuum

	sink    *breaker     // the sink: up, down since when, or on trial (outage.go)
	batches atomic.Int32 // batches between their claim and their recorded outcome
	// sizes is the unordered workers' adaptive batch size, orderedSizes the
	// ordered loop's (batch_size.go).
	sizes, orderedSizes *batchSizer
	// keyBatches: pub takes several events of one key per call
	// (publishers.KeyBatcher), so ordered batches are published in one round.
	keyBatches bool
	live       *liveness // the claim loops' progress, for Liveness
}

// BatchResult counts what happened to one claimed batch.
type BatchResult struct {
	// Claimed is the number of rows taken.
	Claimed int
	// Sent, Retried, Failed and Released count rows whose outcome was
	// recorded. Retried rows wait for a later attempt; those deferred
	// because the sink was unavailable got their attempt back, and so did
	// Released rows, which are claimable again at once.
	Sent, Retried, Failed, Released int
	// Fenced counts rows whose outcome was not recorded because another
	// claim held them by then.
	Fenced int
	// Abandoned counts rows whose publish did not return within half a
	// second of its deadline (PublishTimeout, or ShutdownTimeout after
	// cancellation): the sink may still be sending them, so they keep
	// their lease and return when it ends. Claimed = Sent + Retried +
	// Failed + Released + Fenced + Abandoned.
	Abandoned int
	// SinkUnavailable is true when the sink took none of the batch and not
	// because of the messages: it is down. The batch's rows went back to
	// pending, due at once, without spending an attempt; Run claims none
	// until the sink answers again.
	SinkUnavailable bool
	// Backoff is, when SinkUnavailable, how long to wait before trying the
	// sink again with a batch; it grows with each consecutive outage batch,
	// from OutageBackoffMin up to OutageBackoffMax.
	Backoff time.Duration
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
	pg := newPGStore(pool, cfg.Table, cfg.Lease, cfg.Ordering, claimBytesOf(cfg))
	return newRelay(pg, pg, pub, cfg, cfg.Table.String()), nil
}

// NewMySQL returns a Relay that reads the outbox table of a MySQL 8.0 or
// MariaDB 10.6 (or later) database through db, a go-sql-driver/mysql pool
// opened with parseTime=true (docs/mysql.md), and publishes to pub. The
// relay's promises are New's; what only PostgreSQL offers is refused with
// an error wrapping ErrUnsupported: ordered topics
// (docs/ordering.md#mysql-and-mariadb) and lock claims. It does not touch
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
	switch {
	case cfg.Ordering.enabled():
		return nil, fmt.Errorf("relay: ordered topics on MySQL: %w (docs/ordering.md#mysql-and-mariadb)", ErrUnsupported)
	case cfg.Claim == ClaimLock:
		return nil, fmt.Errorf("relay: lock claims on MySQL: %w", ErrUnsupported)
	}
	name := cfg.Table.Name
	if schema != "" {
		name = schema + "." + name
	}
	return newRelay(newMySQLStore(db, cfg.Table, cfg.Lease, claimBytesOf(cfg)), nil, pub, cfg, name), nil
}

// newRelay returns the relay of cfg (defaults applied, valid) on st; pg
// is st on PostgreSQL, nil elsewhere. table names the table in logs.
func newRelay(st store, pg *pgStore, pub publishers.Publisher, cfg Config, table string) *Relay {
	r := &Relay{
		cfg:   cfg,
		pub:   pub,
		store: st,
		pg:    pg,
		log:   cfg.Logger.With("relay_id", cfg.ID, "table", table),
		bell:  newBell(),
		turns: newTurns(),
		obs:   cfg.Observer,
		live:  newLiveness(cfg),
	}
	r.leases = &leaseClaims{r: r}
	r.stream = newStreamClaims(r.leases, newSentBatching(r, sentBatchWait))
	if pg != nil && cfg.Ordering.allTopics() {
		r.stream.dueKeyless = pg.dueKeyless
	}
	r.locks = lockClaims{r}
	r.sizes = newBatchSizer(r.cfg.BatchMin, r.cfg.BatchSize, r.cfg.BatchBytes)
	r.orderedSizes = newBatchSizer(r.cfg.BatchMin, r.cfg.BatchSize, r.cfg.BatchBytes)
	r.sink = newBreaker(cfg, r.log, r.store.countDue, r.observe, func() {
		r.bell.ring()
		r.turns.signal()
	})
	r.prober, _ = pub.(publishers.Prober)
	r.keyBatches = keyBatches(pub)
	// Claim numbers start at a random point, so that replicas mistakenly
	// given the same ID still write distinct locked_by tokens.
	r.seq.Store(rand.Uint64() >> 24)
	return r
}

// ID returns the replica id. Each claim writes "<ID>#<n>" to locked_by, n
// numbering the replica's claims from a random start, so that a write-back
// is fenced by the claim, not only by the replica.
func (r *Relay) ID() string { return r.cfg.ID }

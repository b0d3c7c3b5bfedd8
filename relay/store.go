package relay

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// store is what the relay's loops need from the database that holds the
// outbox table, whichever it is: pgStore (PostgreSQL, store_postgres.go)
// or mysqlStore (MySQL and MariaDB, store_mysql.go). Each runs the same
// lifecycle with the same promises: claims lease rows under a token, every
// write-back is fenced by that token, and the database's clock times every
// lease (docs/architecture.md#the-store).
//
// What only PostgreSQL offers is pgStore's own, behind the small
// interfaces below (ordered delivery, lock claims, LISTEN wake-ups) or
// held by the service that uses it (partitioned tables and VACUUM:
// retention.go, partitions.go); New refuses a configuration that needs
// it on another database.
type store interface {
	// ready checks that the database answers and that the table's schema
	// is the one this relay needs.
	ready(ctx context.Context) error
	// fatal reports errors that retrying cannot fix: a missing or newer
	// schema, an invalid name, a refused login or permission.
	fatal(err error) bool

	// claim leases up to limit due rows to the claim token owner: pending
	// rows from rg's floor up, lapsed leases when rg says so, and the rows
	// rg.swept names. sent are batches published whole whose rows it marks
	// sent first; fenced counts, per batch, the rows another claim held by
	// then. A store without a claim floor reads from the bottom.
	claim(ctx context.Context, owner string, limit int, rg claimRange, sent []sentBatch) (rows []row, fenced []int, err error)
	// lookBelow finds due pending rows below the floor from (sweep.go);
	// full is true when it stopped at limit.
	lookBelow(ctx context.Context, from floor, limit int) (ids [][16]byte, full bool, err error)

	// The write-backs: each touches only the rows owner still holds and
	// returns how many of the others it was given (fenced). markSent's
	// tids, where not nil, are where the claim left the rows (sentTIDs),
	// which a store may use to find them instead of their ids.
	markSent(ctx context.Context, owner string, ids []uuid.UUID, tids []pgtype.TID) (fenced int, err error)
	markRetry(ctx context.Context, owner string, rs []retry) (fenced int, err error)
	markFailed(ctx context.Context, owner string, fs []failure) (fenced int, err error)
	release(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error)
	extend(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error)

	// countDue counts due pending rows, up to limit (the outage breaker's
	// question: is there work for a sink that came back?).
	countDue(ctx context.Context, limit int) (int, error)
	// backlog reads the table's rows by state, each count stopping at
	// limit and replaced by the server's estimate beyond (Relay.Backlog).
	backlog(ctx context.Context, limit int64) (Backlog, error)

	// The retention job (janitor.go): claimJob starts a run of job for
	// owner; deleteSent deletes up to limit sent rows older than
	// retention from target ("" is the table) while owner holds the job;
	// finishJob ends the run.
	claimJob(ctx context.Context, job, owner string) (ok bool, err error)
	deleteSent(ctx context.Context, owner, target string, retention time.Duration, limit int) (deleted int64, held bool, err error)
	finishJob(ctx context.Context, job, owner string, complete bool, interval time.Duration) (held bool, err error)
}

// shardStore is ordered delivery's part of a store (store_ordered.go,
// docs/ordering.md): shard leases, claims in key order under a shard's
// lease, and write-backs fenced by it.
type shardStore interface {
	ensureShards(ctx context.Context, shards int) error
	// prepared reports whether the table's primary key is prepared for
	// ordered delivery (migrations.PrepareOrdered).
	prepared(ctx context.Context) (bool, error)
	leaseShard(ctx context.Context, owner string) (shard int, ok bool, err error)
	extendShard(ctx context.Context, shard int, owner string) (held bool, err error)
	claimOrdered(ctx context.Context, owner string, limit, shard int, lessee string, prior *orderedWrite) (orderedClaim, recorded, error)
	recordOrdered(ctx context.Context, w orderedWrite) (recorded, error)
	handBack(ctx context.Context, shard int, owner string, prior *orderedWrite) (recorded, error)
}

// lockStore claims rows under locks held in an open transaction
// (store_lock.go, ClaimLock).
type lockStore interface {
	claimLocked(ctx context.Context, limit int) (*lockedRows, error)
}

var (
	_ store      = (*pgStore)(nil)
	_ shardStore = (*pgStore)(nil)
	_ lockStore  = (*pgStore)(nil)
)

// ErrUnsupported is returned, wrapped, for what the relay offers on
// PostgreSQL only (ordered delivery, lock claims, partitioned tables)
// when it runs on another database.
var ErrUnsupported = errors.New("not supported on this database")

// row is a claimed outbox row before decoding. createdAt is scanned
// loosely so that a hand-made 'infinity' fails its row, not the claim.
// size is its payload, key and headers as the database measured them; a
// row above the claim's event bound comes without them (claimBytes).
type row struct {
	id        uuid.UUID
	topic     string
	key       []byte
	payload   []byte
	headers   []byte
	attempt   int
	createdAt pgtype.Timestamptz
	size      int64
	tx        int64              // writing transaction; ordered claims only
	due       pgtype.Timestamptz // next_retry_at; lease claims only
	// tid is where the lease claim left the row (its tuple id), for
	// mark_sent_by_tid.sql, or where the ordered claim read it, for
	// record_ordered.sql; not Valid for lock claims, nor for claims of a
	// partitioned table.
	tid pgtype.TID
}

// retry and failure are write-back requests. A refunded retry gives the
// attempt back.
type retry struct {
	id     uuid.UUID
	delay  time.Duration
	error  string
	refund bool
}

type failure struct {
	id    uuid.UUID
	error string
}

package relay

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// Store is what the relay's loops need from the database that holds the
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
type Store interface {
	// Ready checks that the database answers and that the table's schema
	// is the one this relay needs.
	Ready(ctx context.Context) error
	// Fatal reports errors that retrying cannot fix: a missing or newer
	// schema, an invalid name, a refused login or permission.
	Fatal(err error) bool

	// Claim leases up to limit due rows to the claim token owner: pending
	// rows from rg's floor up, lapsed leases when rg says so, and the rows
	// rg.swept names. sent are batches published whole whose rows it marks
	// sent first; fenced counts, per batch, the rows another claim held by
	// then. A store without a claim floor reads from the bottom.
	Claim(ctx context.Context, owner string, limit int, rg ClaimRange, sent []sentBatch) (rows []Row, fenced []int, err error)
	// LookBelow finds due pending rows below the floor from (sweep.go);
	// full is true when it stopped at limit.
	LookBelow(ctx context.Context, from Floor, limit int) (ids [][16]byte, full bool, err error)

	// The write-backs: each touches only the rows owner still holds and
	// returns how many of the others it was given (fenced). MarkSent's
	// tids, where not nil, are where the claim left the rows (sentTIDs),
	// which a store may use to find them instead of their ids.
	MarkSent(ctx context.Context, owner string, ids []uuid.UUID, tids []pgtype.TID) (fenced int, err error)
	MarkRetry(ctx context.Context, owner string, rs []Retry) (fenced int, err error)
	MarkFailed(ctx context.Context, owner string, fs []Failure) (fenced int, err error)
	Release(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error)
	Extend(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error)

	// CountDue counts due pending rows, up to limit (the outage breaker's
	// question: is there work for a sink that came back?).
	CountDue(ctx context.Context, limit int) (int, error)
	// Backlog reads the table's rows by state, each count stopping at
	// limit and replaced by the server's estimate beyond (Relay.Backlog).
	Backlog(ctx context.Context, limit int64) (Backlog, error)

	// The retention job (janitor.go): ClaimJob starts a run of job for
	// owner; deleteSent deletes up to limit sent rows older than
	// retention from target ("" is the table) while owner holds the job;
	// finishJob ends the run.
	ClaimJob(ctx context.Context, job, owner string) (ok bool, err error)
	DeleteSent(ctx context.Context, owner, target string, retention time.Duration, limit int) (deleted int64, held bool, err error)
	FinishJob(ctx context.Context, job, owner string, complete bool, interval time.Duration) (held bool, err error)
}

// Shards is ordered delivery's part of a store (store_ordered.go,
// docs/ordering.md): shard leases, claims in key order under a shard's
// lease, and write-backs fenced by it.
type Shards interface {
	EnsureShards(ctx context.Context, shards int) error
	// Prepared reports whether the table's primary key is prepared for
	// ordered delivery (migrations.PrepareOrdered).
	Prepared(ctx context.Context) (bool, error)
	LeaseShard(ctx context.Context, owner string) (shard int, ok bool, err error)
	ExtendShard(ctx context.Context, shard int, owner string) (held bool, err error)
	ClaimOrdered(ctx context.Context, owner string, limit, shard int, lessee string, prior *OrderedWrite) (OrderedClaim, Recorded, error)
	RecordOrdered(ctx context.Context, w OrderedWrite) (Recorded, error)
	HandBack(ctx context.Context, shard int, owner string, prior *OrderedWrite) (Recorded, error)
}

// LockClaims claims rows under locks held in an open transaction
// (store_lock.go, ClaimLock).
type LockClaims interface {
	ClaimLocked(ctx context.Context, limit int) (*lockedRows, error)
}

var (
	_ Store      = (*pgStore)(nil)
	_ Shards     = (*pgStore)(nil)
	_ LockClaims = (*pgStore)(nil)
)

// ErrUnsupported is returned, wrapped, for what the relay offers on
// PostgreSQL only (ordered delivery, lock claims, partitioned tables)
// when it runs on another database.
var ErrUnsupported = errors.New("not supported on this database")

// Row is a claimed outbox Row before decoding. createdAt is scanned
// loosely so that a hand-made 'infinity' fails its Row, not the claim.
// size is its payload, key and headers as the database measured them; a
// Row above the claim's event bound comes without them (claimBytes).
type Row struct {
	ID        uuid.UUID
	Topic     string
	Key       []byte
	Payload   []byte
	Headers   []byte
	Attempt   int
	CreatedAt pgtype.Timestamptz
	Size      int64
	Tx        int64              // writing transaction; ordered claims only
	Due       pgtype.Timestamptz // next_retry_at; lease claims only
	// TID is where the lease claim left the row (its tuple id), for
	// mark_sent_by_tid.sql, or where the ordered claim read it, for
	// record_ordered.sql; not Valid for lock claims, nor for claims of a
	// partitioned table.
	TID pgtype.TID
}

// Retry and failure are write-back requests. A refunded Retry gives the
// attempt back.
type Retry struct {
	ID     uuid.UUID
	Delay  time.Duration
	Error  string
	Refund bool
}

type Failure struct {
	ID    uuid.UUID
	Error string
}

// Package store is the contract between the relay's loops and the
// database that holds the outbox table: the Store interface every
// database's store implements (pgstore for PostgreSQL, mysqlstore for
// MySQL and MariaDB), the small interfaces for what only some databases
// offer, and the row types they share. It knows no driver: a store
// converts its driver's types into these.
//
// Every store runs the same lifecycle with the same promises: claims lease
// rows under a token, every write-back is fenced by that token, and the
// database's clock times every lease (docs/architecture.md#the-store).
package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Store is what the relay's loops need from the database that holds the
// outbox table, whichever it is. What only some databases offer is one of
// the small interfaces below, which a store implements or not; the relay
// finds them by type assertion and refuses a configuration that needs one
// its store lacks.
type Store interface {
	// Ready checks that the database answers and that the table's schema
	// is the one this relay needs.
	Ready(ctx context.Context) error
	// Fatal reports errors that retrying cannot fix: a missing or newer
	// schema, an invalid name, a refused login or permission.
	Fatal(err error) bool

	// Claim leases up to limit due rows to the claim token owner: pending
	// rows from rg's floor up, lapsed leases when rg says so, and the rows
	// rg.Swept names. sent are batches published whole whose rows it marks
	// sent first, in the same transaction; fenced counts, per batch, the
	// rows another claim held by then. A store without a claim floor reads
	// from the bottom. On an error nothing is written.
	Claim(ctx context.Context, owner string, limit int, rg ClaimRange, sent []SentBatch) (rows []Row, fenced []int, err error)
	// LookBelow finds due pending rows below the floor from and lapsed
	// leases, without locking anything (relay/sweep.go); full is true when
	// it stopped at limit.
	LookBelow(ctx context.Context, from Floor, limit int) (ids [][16]byte, full bool, err error)

	// The write-backs: each touches only the rows owner still holds and
	// returns how many of the others it was given (fenced). MarkSent's
	// tids, where not nil, are where the claim left the rows (Row.TID),
	// which a store may use to find them instead of their ids.
	MarkSent(ctx context.Context, owner string, ids []uuid.UUID, tids []TID) (fenced int, err error)
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

	// The jobs (relay/retention.go, relay/partitions.go): ClaimJob starts a
	// run of job for owner, with a lease of one Lease, if it is due and no
	// other run holds it; DeleteSent deletes up to limit sent rows older
	// than retention from partition ("" is the whole table) while owner
	// holds JobRetention, counting them in the job row; FinishJob ends the
	// run, and a complete one schedules the next interval later. held is
	// false, and nothing changed, when owner no longer held the job.
	ClaimJob(ctx context.Context, job, owner string) (ok bool, err error)
	DeleteSent(ctx context.Context, owner, partition string, retention time.Duration, limit int) (deleted int64, held bool, err error)
	FinishJob(ctx context.Context, job, owner string, complete bool, interval time.Duration) (held bool, err error)
}

// The jobs' rows in the jobs table: the retention job (migration 004
// creates it), and the job that creates the partitions of a partitioned
// table ahead of time (created with the table).
const (
	JobRetention  = "retention"
	JobPartitions = "partitions"
)

// Shards is ordered delivery's part of a store (docs/ordering.md): shard
// leases, claims in key order under a shard's lease, and write-backs
// fenced by it. Both stores have it.
type Shards interface {
	// EnsureShards creates the shard rows when there are none, and checks
	// that there are shards of them.
	EnsureShards(ctx context.Context, shards int) error
	// Prepared reports whether the table's primary key is prepared for
	// ordered delivery (migrations.PrepareOrdered).
	Prepared(ctx context.Context) (bool, error)
	// LeaseShard leases a shard with work to owner; ok is false when none
	// is free.
	LeaseShard(ctx context.Context, owner string) (shard int, ok bool, err error)
	// ExtendShard renews owner's lease of shard; held is false when owner
	// no longer holds it.
	ExtendShard(ctx context.Context, shard int, owner string) (held bool, err error)
	// ClaimOrdered claims up to limit rows of shard for owner, in write
	// order per key; lessee holds the shard's lease. prior, when not nil,
	// is the shard's last write-back, written first in the same round
	// trip; got counts it.
	ClaimOrdered(ctx context.Context, owner string, limit, shard int, lessee string, prior *OrderedWrite) (c OrderedClaim, got Recorded, err error)
	// RecordOrdered writes w on its own, nothing once w.Lessee no longer
	// holds the shard.
	RecordOrdered(ctx context.Context, w OrderedWrite) (Recorded, error)
	// HandBack returns shard, leased by owner, with prior written first
	// when it is not nil.
	HandBack(ctx context.Context, shard int, owner string, prior *OrderedWrite) (Recorded, error)
	// DueKeyless reports whether a keyless row is due or a lease has
	// lapsed: when every topic is ordered, whether an unordered claim may
	// find a row.
	DueKeyless(ctx context.Context) (bool, error)
}

// LockClaims claims rows under locks held in an open transaction
// (ClaimLock). Only PostgreSQL's store has it.
type LockClaims interface {
	// ClaimLocked opens a transaction and locks up to limit unordered rows
	// in it. The caller ends it with Record or Rollback, then calls Close.
	ClaimLocked(ctx context.Context, limit int) (Locked, error)
}

// Locked is a lock claim's open transaction. The rows' lock is the fence:
// no other claim or write-back can touch them until it ends, and it ends
// with the session if the relay dies or is frozen past its lease.
type Locked interface {
	// Rows are the rows the claim locked.
	Rows() []Row
	// Renew keeps the claim; callers let it finish (a cancelled statement
	// would abort the transaction).
	Renew(ctx context.Context) error
	// Record writes out, fenced by owner, and commits; got counts what it
	// wrote. Once a statement fails the transaction is lost and the rows
	// are claimable again.
	Record(ctx context.Context, owner string, out Outcome) (got Recorded, err error)
	// Rollback ends the transaction, within 5s of hard at most.
	Rollback(hard context.Context)
	// Close returns the connection.
	Close()
}

// Listener is a store that can wake the relay when an insert commits
// (PostgreSQL's LISTEN, migration 003).
type Listener interface {
	// Listen calls notified for every notification, until the connection
	// fails or ctx ends; connected runs once listening took effect.
	Listen(ctx context.Context, connected, notified func()) error
}

// Vacuumer is a store that can VACUUM the table after a retention run
// (PostgreSQL).
type Vacuumer interface {
	// Vacuum runs VACUUM on the table unless the role may not; allowed is
	// false, and nothing runs, then.
	Vacuum(ctx context.Context) (allowed bool, err error)
}

// Partitions is a store whose table may be partitioned by the time its
// ids were made (PostgreSQL, docs/architecture.md#partitioned-tables).
// The partitions' own steps run in transactions fenced by a job, with
// PartitionLockTimeout as their lock_timeout.
type Partitions interface {
	// Partitioning reads the table's partitions; ok is false, and p empty,
	// when the table is not partitioned.
	Partitioning(ctx context.Context) (p Partitioning, ok bool, err error)
	// DropPartition drops p if every row in it was sent before cutoff
	// (dropped; rows is the statistics' count of its rows), for the run
	// owner of job.
	DropPartition(ctx context.Context, job, owner string, p Partition, cutoff time.Time) (dropped bool, rows int64, step JobStep, err error)
	// CreatePartitions creates the partitions missing from now up to
	// ahead, for the run owner of job; created names them.
	CreatePartitions(ctx context.Context, job, owner string, ahead time.Duration) (created []string, step JobStep, err error)
}

// PartitionLockTimeout bounds how long a partition step waits for the
// locks that creating and dropping partitions take. Writers and claims
// queue behind a lock request that waits: the step gives up after this
// long and the job tries again at its next run.
const PartitionLockTimeout = 250 * time.Millisecond

// Partitioning is a partitioned table's partitions at one moment.
type Partitioning struct {
	Now     time.Time   // the database clock's now()
	Parts   []Partition // its range partitions, oldest first
	Default string      // its DEFAULT partition's name; "" when it has none
}

// Partition is one range partition: the events whose ids were made from
// From up to, not including, To.
type Partition struct {
	Name     string // in the table's schema
	From, To time.Time
}

// JobStep says how a step fenced by a job ended. Held is false when the
// run no longer held the job, and Waited true when a lock was not free
// within PartitionLockTimeout; either way nothing changed.
type JobStep struct{ Held, Waited bool }

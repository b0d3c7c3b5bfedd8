package relay

import (
	"context"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
	"sync/atomic"
)

// A claimer is a claim strategy: how the pipeline (pipeline.go) takes a
// batch of rows, keeps them while they are published, and writes their
// outcome. There are four:
//
//   - leaseClaims (claim_lease.go): rows are leased, processing under the
//     claim's token until a deadline, and every write-back is fenced by
//     that token. ProcessBatch claims this way.
//   - streamClaims (claim_lease.go): lease claims as Run's workers make
//     them in a stream of batches: from the claim floor (claim_floor.go),
//     looking for lapsed leases every lapsedEvery, with mark-sent batching
//     (sent_batching.go).
//   - lockClaims (claim_lock.go, ClaimLock): rows are locked in a
//     transaction that stays open while they are published.
//   - shardClaims (claim_ordered.go): the rows of one leased shard of
//     ordered topics, in write order per key.
type claimer interface {
	// claim takes up to limit rows for the claim token owner. ctx is the
	// batch's: once it is cancelled no claim starts. hard is the batch's
	// shutdown bound, under which the claim's statement runs.
	claim(ctx, hard context.Context, owner string, limit int) (*batch, error)
}

// batch is a claimed batch of rows and what its claimer does with them.
type batch struct {
	mode ClaimMode // ClaimLease, ClaimLock or ClaimOrdered, for events and logs
	rows []store.Row
	// ordered publishes in rounds of at most one event per key, each
	// after the previous round was acknowledged; park fails an event that
	// got a transient error at once instead of retrying it
	// (HeadOfLinePark).
	ordered, park bool
	// renew keeps the claim's hold on the rows while they are published,
	// every Lease/3, and returns how many it found lost.
	renew func(ctx context.Context) (lost int, err error)
	// renewed is set once renew ran: the rows' versions moved, and the
	// claim's tuple ids no longer find them (sentTIDs).
	renewed atomic.Bool
	// record writes the outcome, fenced by owner, and counts it in res.
	// queued is true when the write was left to a later claim (mark-sent
	// batching): the batch is logged when it is done.
	record func(hard context.Context, owner string, out *outcome, res *BatchResult) (queued bool, err error)
	// end, if set, runs once the batch is over, recorded or not.
	end func(hard context.Context)
	// ph is how long the batch's steps took, for the debug log.
	ph phases
	// slot is the claiming loop's progress slot (liveness.go), or nil.
	slot *atomic.Int64
}

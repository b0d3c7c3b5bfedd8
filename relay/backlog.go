package relay

import (
	"context"
	"fmt"
	"time"
)

// Backlog is what waits in the outbox table at one moment (Relay.Backlog).
type Backlog struct {
	// PendingDue counts pending rows whose next_retry_at has passed:
	// claimable now (ordered rows also wait for older transactions and
	// for their key's earlier events).
	PendingDue BacklogCount
	// PendingDelayed counts pending rows whose next_retry_at is ahead:
	// scheduled events, and events waiting for a retry.
	PendingDelayed BacklogCount
	// Processing counts claimed rows, being published (or whose lease
	// ended and that wait to be claimed again).
	Processing BacklogCount
	// Failed counts failed rows.
	Failed BacklogCount
	// OldestDue is now() - next_retry_at of the pending row due longest,
	// on the database clock; 0 when none is due. For an event never
	// attempted next_retry_at is its insert's time (the start of the
	// writing transaction), so OldestDue is how long the oldest
	// unpublished event has been waiting; for a retried event, how long
	// since its retry fell due.
	OldestDue time.Duration
	// KeysBlocked counts, with ordered delivery, the keys of ordered
	// topics whose earliest unfinished event waits for a retry after a
	// failed publish (HeadOfLineWait), holding back the key's later
	// events, among the 10,000 delayed rows due soonest (or the limit, if
	// smaller): retries are due within BackoffMax, before most scheduled
	// events. 0 without ordered topics.
	KeysBlocked int64
}

// BacklogCount is one count of a Backlog.
type BacklogCount struct {
	// Rows is the count. It is exact when it is below the limit given to
	// Backlog; at the limit the count stopped, and Rows is the planner's
	// estimate instead, or the limit if that is more.
	Rows int64
	// Estimated is true when Rows is the server's estimate.
	Estimated bool
}

// Backlog reads what waits in the table: rows by state, the age of the
// oldest due row and the keys blocked at the head of line. Each count
// reads one index (on PostgreSQL the partial pending_idx, processing_idx
// and failed_idx; on MySQL due_idx and lapsed_idx, which lead with the
// status) and stops at limit rows, so a read costs at most about 4 x
// limit index entries, however large the table: sent rows are never
// read. A count that reaches limit is replaced by the server's estimate
// (the statement is planned, not run; see BacklogCount). limit <= 0
// means 100,000. On PostgreSQL, when ctx has a deadline, the read's
// transaction gets it as its statement timeout too, so that the server
// stops the statements when the caller gives up. Metrics call it in the background (relay/metrics); it takes
// no part in the relay's work and may be called before Run.
func (r *Relay) Backlog(ctx context.Context, limit int64) (Backlog, error) {
	if limit <= 0 {
		limit = defaultBacklogLimit
	}
	b, err := r.store.Backlog(ctx, limit)
	if err != nil {
		return Backlog{}, fmt.Errorf("relay: read backlog: %w", err)
	}
	return Backlog{
		PendingDue: BacklogCount(b.PendingDue), PendingDelayed: BacklogCount(b.PendingDelayed),
		Processing: BacklogCount(b.Processing), Failed: BacklogCount(b.Failed),
		OldestDue: b.OldestDue, KeysBlocked: b.KeysBlocked,
	}, nil
}

// defaultBacklogLimit is Backlog's limit when none is given.
const defaultBacklogLimit = 100_000

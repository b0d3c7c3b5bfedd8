package relay

import (
	"bytes"

	"github.com/jackc/pgx/v5/pgtype"
)

// floor is where a claim in a backlog starts reading pending rows: a key
// of pending_idx, (next_retry_at, id).
//
// A claim reads pending_idx from its lowest entry. Each row a claim takes
// leaves a dead entry behind at that low end, and only VACUUM removes
// them: while a backlog drains, every claim walks past the entries of
// every row claimed before it. After 700,000 rows of a burst a claim read
// 3,500 index pages of them, 11 ms of its 19, before its first row
// (docs/benchmarks.md#the-claim-floor).
//
// So while Run drains a backlog (its last claim filled its batch), a claim
// starts at the lowest key the previous claim took. Every pending row below
// it was, at that claim, taken already, locked by another claim, or not
// yet committed. A row can still turn up below the floor later: a row of
// a transaction that was open then and began before the rows that claim
// took (next_retry_at defaults to the writing transaction's start), a row
// another replica gave back or whose claim rolled back, a row set back by
// hand. The claims that look for lapsed leases, one every lapsedEvery,
// start at the bottom and take those; so does the claim after one that did
// not fill its batch, which ends the backlog. The floor therefore never
// delays an event of a stream the relay keeps up with, and in a backlog,
// where every event waits its turn anyway, delays such rows by lapsedEvery
// at most.
type floor struct {
	due pgtype.Timestamptz
	id  [16]byte
}

// bottom is the floor of a claim that reads pending rows from the lowest.
var bottom = floor{due: pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}}

// nextFloor returns the floor for the claim after one that took rows with
// a batch of limit: bottom unless it filled its batch.
func nextFloor(rows []row, limit int) floor {
	if len(rows) < limit {
		return bottom
	}
	low, found := bottom, false
	for _, r := range rows {
		if !r.due.Valid || r.due.InfinityModifier != pgtype.Finite {
			continue // hand-made: such a key is no floor
		}
		if !found || r.due.Time.Before(low.due.Time) ||
			r.due.Time.Equal(low.due.Time) && bytes.Compare(r.id[:], low.id[:]) < 0 {
			low, found = floor{due: r.due, id: r.id}, true
		}
	}
	return low
}

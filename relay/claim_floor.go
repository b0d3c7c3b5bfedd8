package relay

import (
	"time"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The claim floor (store.Floor) is where Run's claims start reading
// pending rows: a key of pending_idx, (next_retry_at, id).
//
// Each row a claim takes, and each row marked sent, leaves a dead entry
// in the partial indexes it leaves (pending_idx, processing_idx), and only
// VACUUM removes them; one that a transaction anywhere in the database
// might still see (a REPEATABLE READ transaction, pg_dump, a session idle
// in a transaction) it cannot remove at all, nor can a scan mark it dead
// for the scans after it. A claim that read pending_idx from its lowest
// entry walked past the entry of every row claimed since: after a large
// burst, thousands of index pages, most of the claim's time; under a held
// snapshot, a steady stream's latency grew tenfold
// (docs/benchmarks.md#under-a-held-snapshot).
//
// So Run's claims read pending rows from the floor up, and the floor
// follows the rows they take, never going down:
//
//   - after a claim that filled its batch (a backlog), the lowest key it
//     took: the next claim starts where this one's rows began;
//   - after a claim that took fewer rows (a steady stream), the lowest key
//     it took less floorMargin: the rows of writing transactions that ran
//     for less than floorMargin, and committed after a claim took rows of
//     younger transactions, are still above it (next_retry_at defaults to
//     the writing transaction's start);
//   - after a claim that took nothing, or one that looked for lapsed
//     leases or took rows a sweep found and filled its batch (which may
//     have had no room left for pending rows), it stays.
//
// A claim then walks past the dead entries of the rows claimed within
// about floorMargin, however many VACUUM has left below.
//
// Every pending row below the floor was, when a claim moved the floor
// above it, taken already, locked by another claim, or not yet committed.
// One can still turn up there later: a row of a transaction that ran longer
// than floorMargin (or, in a backlog, that began before the rows the claim
// took), a row another replica gave back or whose claim rolled back, a row
// set back by hand or written with a next_retry_at in the past. So can a
// lease that lapsed before the window the claims' own looks read
// (streamClaims). A sweep finds them, in two steps (sweep.go):
//
//   - a look, which locks nothing and runs beside the claims, not in a
//     claim's turn: it reads the due pending rows below the floor from the
//     lowest, and the lapsed leases from the oldest, up to BatchSize of
//     each (look_below.sql). Under a held snapshot it walks every dead
//     entry of both indexes, up to a second past a million of them, and
//     the claims go on meanwhile;
//   - the claims after a look that found rows take them by id, from the
//     primary key, beside the rows from the floor (claim.sql): that reads
//     a few pages a row, however many dead entries lie below the floor.
//
// A look runs once sweepRatio times the duration of the shortest of the
// last four has passed since the last one began (sweep.go, lookCosts), at
// least lapsedEvery and at most sweepMax later,
// and only after a claim since the last look (an idle relay looks as
// often as it polls) that took every row that look found. A look that
// found BatchSize rows of either kind is followed by another as soon as
// the claims took them. A row that turns up below the floor therefore
// waits at most about sweepMax and one look, and about lapsedEvery on a
// healthy table.

const (
	// floorMargin is how far the floor stays below the oldest row of a
	// claim that did not fill its batch: how long a writing transaction
	// may run and still have its rows claimed as soon as they commit,
	// not at the next sweep.
	floorMargin = time.Second
	// lapsedMargin widens each look for lapsed leases beyond the time
	// since the last complete one: it covers the time between a claim's
	// send and its now() in the database.
	lapsedMargin = lapsedEvery
	// sweepRatio and sweepMax space the looks below the floor (see
	// above).
	sweepRatio = 200
	sweepMax   = time.Minute
)

// everything is the range of a claim that reads every pending row and
// every lapsed lease, from the oldest: ProcessBatch's claims.
var everything = store.ClaimRange{From: store.Bottom, Lapsed: true}

// nextFloor returns the floor for the claim after one that read pending
// rows from prev (or lower) up with a batch of limit and took rows (see
// above). A claim that also looked for lapsed leases counts only if its
// batch was not full: then it took every due pending row it saw.
func nextFloor(prev store.Floor, rows []store.Row, limit int) store.Floor {
	low, found := store.Bottom, false
	for _, r := range rows {
		if !r.Due.Finite() {
			continue // hand-made: such a key is no floor
		}
		k := store.Floor{Due: r.Due, ID: r.ID}
		if !found || k.Less(low) {
			low, found = k, true
		}
	}
	if !found {
		return prev
	}
	if len(rows) < limit {
		low = store.Floor{Due: store.Time{Time: low.Due.Time.Add(-floorMargin), Valid: true}}
	}
	if low.Less(prev) {
		return prev
	}
	return low
}

// sweepEvery returns how long after a look below the floor that took
// took the next one is due.
func sweepEvery(took time.Duration) time.Duration {
	return min(max(sweepRatio*took, lapsedEvery), sweepMax)
}

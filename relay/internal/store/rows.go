package store

import (
	"bytes"
	"time"

	"github.com/google/uuid"
)

// Row is a claimed outbox row before decoding. CreatedAt is read loosely
// so that a hand-made 'infinity' fails its row, not the claim. Size is
// its payload, key and headers as the database measured them; a row above
// the claim's event bound comes without them (Bounds).
type Row struct {
	ID        uuid.UUID
	Topic     string
	Key       []byte
	Payload   []byte
	Headers   []byte
	Attempt   int
	CreatedAt Time
	Size      int64
	Tx        int64 // ordered claims only: the writing transaction (PostgreSQL), or the key's seq (MySQL)
	Due       Time  // next_retry_at; lease claims only
	// TID is where the lease claim left the row (its tuple id), for a
	// mark-sent by tuple id, or where the ordered claim read it, for the
	// ordered write-back; not Valid for lock claims, claims of a
	// partitioned table, nor on MySQL.
	TID TID
}

// Time is a timestamp as PostgreSQL may hold it: a time, -infinity
// (Inf -1) or infinity (Inf 1); not Valid when NULL.
type Time struct {
	Time  time.Time
	Inf   int8
	Valid bool
}

// Finite reports whether t is a time: not NULL, nor an infinity.
func (t Time) Finite() bool { return t.Valid && t.Inf == 0 }

// TID is where PostgreSQL holds a row version (a tuple id, ctid). Its
// fields are those of pgx's pgtype.TID, so that the PostgreSQL store
// converts one into the other without copying.
type TID struct {
	BlockNumber  uint32
	OffsetNumber uint16
	Valid        bool
}

// TIDsOf returns where a claim read rows (the TID of each row that has
// one), for the write-back, which picks the sent rows among them by id; a
// claim of a partitioned table returns none.
func TIDsOf(rows []Row) []TID {
	tids := make([]TID, 0, len(rows))
	for _, x := range rows {
		if x.TID.Valid {
			tids = append(tids, x.TID)
		}
	}
	return tids
}

// Retry and Failure are write-back requests. A refunded retry gives the
// attempt back.
type Retry struct {
	ID     uuid.UUID
	Delay  time.Duration
	Error  string
	Refund bool
}

// Failure is a row to mark failed, with the reason.
type Failure struct {
	ID    uuid.UUID
	Error string
}

// Outcome is what a write-back records for a batch: the rows sent,
// retried and failed. (Released rows have a statement of their own.)
type Outcome struct {
	Sent     []uuid.UUID
	Retries  []Retry
	Failures []Failure
}

// Recorded counts the rows a write-back wrote, by outcome; Written
// reports that it was written (committed).
type Recorded struct {
	Sent, Retried, Failed int
	Written               bool
}

// Bounds bound what one claim reads (the relay's BatchBytes and
// MaxEventBytes): its rows up to the one at which their sizes reach
// Batch, at least one, and no row's payload, key and headers above Event.
// The database measures the rows before it sends them.
type Bounds struct{ Batch, Event int }

// TooLarge reports whether x is above the event bound: the claim returned
// it without its payload, key and headers.
func (b Bounds) TooLarge(x *Row) bool { return x.Size > int64(b.Event) }

// RowBytes is the size of rows as the claim counted it (payloads, keys
// and headers): what a batch holds in memory and hands to the sink. A row
// above the event bound counts for nothing.
func (b Bounds) RowBytes(rows []Row) int {
	n := 0
	for i := range rows {
		if !b.TooLarge(&rows[i]) {
			n += int(rows[i].Size)
		}
	}
	return n
}

// Full reports whether a claim that asked for limit rows and took rows
// came back full: with limit rows, or stopped by the batch bound. More
// rows may wait.
func (b Bounds) Full(limit int, rows []Row) bool {
	return len(rows) >= limit || b.RowBytes(rows) >= b.Batch
}

// Floor is where a stream of claims starts reading pending rows: a key of
// the pending rows' index, (next_retry_at, id). relay/claim_floor.go says
// how it moves.
type Floor struct {
	Due Time
	ID  [16]byte
}

// Bottom is the floor of a claim that reads pending rows from the lowest.
var Bottom = Floor{Due: Time{Inf: -1, Valid: true}}

// Less reports whether key a sorts before key b in the index.
func (a Floor) Less(b Floor) bool {
	switch {
	case a.Due.Inf != b.Due.Inf:
		return a.Due.Inf < b.Due.Inf
	case a.Due.Inf == 0 && !a.Due.Time.Equal(b.Due.Time):
		return a.Due.Time.Before(b.Due.Time)
	}
	return bytes.Compare(a.ID[:], b.ID[:]) < 0
}

// ClaimRange is what a lease claim reads: the rows Swept if they are
// still due pending rows or lapsed leases, pending rows from From up,
// and, when Lapsed, rows whose lease ran out, of those only the ones
// whose lease ended within LapsedWithin before now when that is positive.
type ClaimRange struct {
	Swept        [][16]byte
	From         Floor
	Lapsed       bool
	LapsedWithin time.Duration
}

// SentBatch is a published batch whose rows a claim marks sent before it
// takes more (relay/sent_batching.go).
type SentBatch struct {
	Owner string      // the token of the claim that took them, which fences the write
	IDs   []uuid.UUID // the rows the sink acknowledged
	TIDs  []TID       // where the claim left them, or nil
}

// Backlog is what waits in the table at one moment: the relay's Backlog,
// which documents each count.
type Backlog struct {
	PendingDue, PendingDelayed, Processing, Failed BacklogCount
	OldestDue                                      time.Duration
	KeysBlocked                                    int64
}

// BacklogCount is one count of a Backlog: exact below the limit, the
// server's estimate (or the limit, if more) when Estimated.
type BacklogCount struct {
	Rows      int64
	Estimated bool
}

package store

import "github.com/google/uuid"

// OrderedClaim is what an ordered claim took (Shards.ClaimOrdered).
type OrderedClaim struct {
	Rows []Row
	// Prefix reports that Rows are the shard's oldest pending rows, in
	// write order, with every topic ordered: once they are all sent, none
	// of the shard's rows below the last one's transaction is pending
	// (Raise).
	Prefix bool
}

// Raise returns the transaction the write-back of c may raise its shard's
// floor to once sent of its rows were sent: the last row's, when c took
// the shard's oldest rows and every one of them was sent; nil otherwise,
// so that the floor stays below a row retried, released or without
// outcome.
func (c OrderedClaim) Raise(sent int) *int64 {
	if !c.Prefix || len(c.Rows) == 0 || sent != len(c.Rows) {
		return nil
	}
	top := c.Rows[0].Tx
	for _, x := range c.Rows {
		top = max(top, x.Tx)
	}
	return &top
}

// OrderedWrite is the write-back of an ordered claim: its outcome Out, by
// the claim Owner of Shard, leased by Lessee.
type OrderedWrite struct {
	Shard         int
	Lessee, Owner string
	Out           Outcome
	// TIDs are where the claim read its rows (none on a partitioned
	// table): the write-back finds the sent rows among them by id, and by
	// primary key those it does not find there.
	TIDs []TID
	// Unknown are the claimed rows whose publish has no outcome.
	Unknown []uuid.UUID
	// Raise, when not nil, is the transaction the shard's floor rises to
	// (OrderedClaim.Raise).
	Raise *int64
}

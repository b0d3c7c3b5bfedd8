package relay

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// leaseClaims are plain lease claims (ClaimLease), as ProcessBatch makes
// them: each reads pending rows from the oldest, looks for lapsed leases
// too, and has its own rows marked sent before the batch is over.
type leaseClaims struct {
	p *pipeline // the relay's: its store, Lease and write-back
	// mu lets one lease claim of the relay run at a time. Claims side by
	// side scan the same index entries, and each would try to lock every
	// row the other is taking and skip it: the database did about a
	// quarter more work per batch for the same events
	// (docs/benchmarks.md). A worker that waits for it still publishes and
	// records while the other claims.
	mu sync.Mutex
}

func (c *leaseClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	cctx, cancel := context.WithTimeout(hard, c.p.cfg.Lease)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil { // cancelled while another claim ran
		return nil, nil
	}
	rows, _, err := c.p.store.Claim(cctx, owner, limit, everything, nil)
	if err != nil {
		return nil, err
	}
	return c.leased(rows, owner), nil
}

// leased returns the batch of rows leased to owner, whose outcome is
// written by recordLeased.
func (c *leaseClaims) leased(rows []store.Row, owner string) *batch {
	ids := make([]uuid.UUID, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	b := &batch{mode: ClaimLease, rows: rows}
	b.renew = func(ctx context.Context) (int, error) {
		b.renewed.Store(true) // before the rows move
		return c.p.store.Extend(ctx, owner, ids)
	}
	b.record = func(hard context.Context, owner string, out *outcome, res *BatchResult) (bool, error) {
		return false, c.p.recordLeased(hard, owner, b.sentTIDs(out), out, res)
	}
	return b
}

// sentTIDs returns the tuple ids the claim returned for the batch's rows
// when the sink acknowledged every one of them and no renewal moved them,
// for a mark-sent by tuple id (mark_sent_by_tid.sql says why that touches
// exactly these rows); nil otherwise, and where the claim returned none
// (a partitioned table, MySQL).
func (b *batch) sentTIDs(out *outcome) []store.TID {
	if len(out.Sent) != len(b.rows) || len(b.rows) == 0 || b.renewed.Load() {
		return nil
	}
	tids := make([]store.TID, len(b.rows))
	for i := range b.rows {
		if !b.rows[i].TID.Valid {
			return nil
		}
		tids[i] = b.rows[i].TID
	}
	return tids
}

// streamClaims are the lease claims of Run's workers, which claim batch
// after batch. Three things make a stream of them cheaper than as many
// plain claims:
//
//   - a claim reads pending rows from the claim floor up, and a look for
//     lapsed leases reads those that ended since the last complete look;
//     rows below the floor and older lapsed leases are found by looks that
//     run beside the claims, and taken by id by the claims after them
//     (claim_floor.go, sweep.go);
//   - a claim looks for lapsed leases only if no claim did within
//     lapsedEvery;
//   - a batch the sink took whole has its rows marked sent by the next
//     claim, in the claim's transaction (sent_batching.go).
type streamClaims struct {
	lease *leaseClaims // its mutex serialises every lease claim of the relay
	sent  *sentBatching
	turns *turns // the workers': a look that found rows invites one (sweep.go)
	// Guarded by lease.mu: where the next claim starts reading pending
	// rows; when a claim last looked for lapsed leases; when the last
	// look that took every lapsed lease it read (its batch was not full)
	// was sent, zero before the first; and the rows the last look below
	// the floor found that no claim has taken yet.
	floor     store.Floor
	lapsedAt  time.Time
	coveredAt time.Time
	found     [][16]byte
	// idle: the last claim took nothing. When every topic is ordered, the
	// next one first asks whether it may find anything (dueKeyless), which
	// plans in a fraction of the claim's time.
	idle bool
	// dueKeyless is that question: store.Shards.DueKeyless when every topic is
	// ordered, nil otherwise.
	dueKeyless func(ctx context.Context) (bool, error)
	// writes holds the store's part of the sent batches a claim marks,
	// reused from claim to claim. Guarded by lease.mu.
	writes []store.SentBatch
	// claimed gets a token after every claim, for the looks (sweep.go).
	claimed chan struct{}
	// lookBelow is the look's statement: Store.LookBelow, or a test's
	// stand-in.
	lookBelow func(ctx context.Context, from store.Floor, limit int) ([][16]byte, bool, error)
}

// newStreamClaims returns the stream claims of lease, with mark-sent
// batching sent, for the workers that share turns, from the bottom.
func newStreamClaims(lease *leaseClaims, sent *sentBatching, turns *turns) *streamClaims {
	return &streamClaims{
		lease: lease, sent: sent, turns: turns, floor: store.Bottom,
		claimed:   make(chan struct{}, 1),
		lookBelow: lease.p.store.LookBelow,
	}
}

// lapsedEvery is how often a stream's claims look for lapsed leases. The
// lapsed-lease branch of the claim reads processing_idx, and until a
// VACUUM that index keeps a dead entry for every row claimed and sent: a
// busy relay claiming every few milliseconds would read many of them
// again each time. Idle relays, which claim once a poll interval, look
// every time.
const lapsedEvery = 250 * time.Millisecond

// lapsedDue reports whether this claim should look for lapsed leases, and
// if so counts it as having looked. Callers hold lease.mu.
func (c *streamClaims) lapsedDue() bool {
	now := time.Now()
	if now.Sub(c.lapsedAt) < lapsedEvery {
		return false
	}
	c.lapsedAt = now
	return true
}

// next returns what the claim sent at now with a batch of limit reads: up
// to limit of the rows the last look found, which it takes off found, and
// the rows from the floor. Callers hold lease.mu.
func (c *streamClaims) next(now time.Time, limit int) store.ClaimRange {
	rg := store.ClaimRange{From: c.floor}
	if n := min(limit, len(c.found)); n > 0 {
		rg.Swept, c.found = c.found[:n:n], c.found[n:]
	}
	if !c.lapsedDue() {
		return rg
	}
	rg.Lapsed = true
	if !c.coveredAt.IsZero() {
		rg.LapsedWithin = now.Sub(c.coveredAt) + lapsedMargin
	}
	return rg
}

// moved records a claim sent at start that read rg and took rows with a
// batch of limit. Callers hold lease.mu.
func (c *streamClaims) moved(rg store.ClaimRange, rows []store.Row, limit int, start time.Time) {
	full := claimBytesOf(c.lease.p.cfg).Full(limit, rows)
	if rg.Lapsed && !full {
		c.coveredAt = start
	}
	// A claim that filled its batch with lapsed leases or rows a look
	// found may not have read pending rows at all.
	if !full || (!rg.Lapsed && len(rg.Swept) == 0) {
		c.floor = nextFloor(c.floor, rows, limit)
	}
}

func (c *streamClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	p := c.lease.p
	cctx, cancel := context.WithTimeout(hard, p.cfg.Lease)
	defer cancel()
	c.lease.mu.Lock()
	if ctx.Err() != nil { // cancelled while another claim ran
		c.lease.mu.Unlock()
		return nil, nil
	}
	sent := c.sent.take()
	if c.idle && c.dueKeyless != nil && len(sent) == 0 && len(c.found) == 0 {
		// Nothing but keyless rows and lapsed leases to claim, and none
		// found last time: look before claiming.
		due, err := c.dueKeyless(cctx)
		if err == nil && !due {
			c.lease.mu.Unlock()
			return nil, nil
		}
	}
	start := time.Now()
	rg := c.next(start, limit)
	for _, sb := range sent {
		c.writes = append(c.writes, sb.SentBatch)
	}
	rows, fenced, err := p.store.Claim(cctx, owner, limit, rg, c.writes)
	clear(c.writes) // keeps no ids alive
	c.writes = c.writes[:0]
	took := time.Since(start)
	if err == nil {
		c.moved(rg, rows, limit, start)
		c.idle = len(rows) == 0
	} else {
		c.found = append(rg.Swept, c.found...) // for the next claim
	}
	c.lease.mu.Unlock()
	select {
	case c.claimed <- struct{}{}:
	default: // a token waits already
	}
	if err != nil {
		c.sent.add(sent...) // for the next claim, or on their own
		return nil, err
	}
	for i, sb := range sent {
		sb.ph.record = took
		c.sent.done(sb, fenced[i])
	}
	b := c.lease.leased(rows, owner)
	b.record = func(hard context.Context, owner string, out *outcome, res *BatchResult) (bool, error) {
		if len(out.Sent) == len(rows) && len(rows) < sentBatchMax {
			c.sent.add(sentBatch{SentBatch: store.SentBatch{Owner: owner, IDs: out.Sent, TIDs: b.sentTIDs(out)}, res: *res, ph: b.ph, topics: out.topics})
			return true, nil
		}
		return false, p.recordLeased(hard, owner, b.sentTIDs(out), out, res)
	}
	return b, nil
}

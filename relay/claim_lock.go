package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// lockClaims are lock claims (ClaimLock): the claim locks its rows in a
// transaction that stays open while they are published, and the outcome
// is written in that transaction (relay/internal/pgstore/lock.go). Nothing is written
// before the publish, so an event costs one row version instead of two
// (docs/architecture.md#claim-modes).
type lockClaims struct {
	db    store.LockClaims
	lease time.Duration // Lease: bounds the claim and the write-back
}

func (c lockClaims) claim(ctx, hard context.Context, owner string, limit int) (*batch, error) {
	cctx, cancel := context.WithTimeout(hard, c.lease)
	defer cancel()
	l, err := c.db.ClaimLocked(cctx, limit)
	if err != nil {
		return nil, err
	}
	return &batch{
		mode: ClaimLock,
		rows: l.Rows(),
		// Any statement restarts the server's idle timer: that is the
		// lease's renewal while the publish runs.
		renew: func(ctx context.Context) (lost int, err error) { return 0, l.Renew(ctx) },
		record: func(hard context.Context, owner string, out *outcome, res *BatchResult) (bool, error) {
			wctx, cancel := context.WithTimeout(hard, c.lease)
			defer cancel()
			got, err := l.Record(wctx, owner, out.Outcome)
			if err != nil {
				l.Rollback(hard)
				return false, fmt.Errorf("record outcome of %d claimed rows: %w; the claim's transaction is over, so they are claimable again (those published will be published again)", res.Claimed, err)
			}
			res.count(got, out)
			return false, nil
		},
		end: func(hard context.Context) {
			if len(l.Rows()) == 0 {
				l.Rollback(hard)
			}
			l.Close()
		},
	}, nil
}

package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Backlog reads the Backlog on PostgreSQL (Relay.Backlog): one statement
// of bounded counts (backlog.sql) and, for the counts that reached limit,
// the planner's estimates (backlog_estimate.sql), in one transaction that
// gets ctx's deadline as its statement timeout.
func (s *Store) Backlog(ctx context.Context, limit int64) (store.Backlog, error) {
	var b store.Backlog
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if deadline, ok := ctx.Deadline(); ok {
			ms := max(time.Until(deadline).Milliseconds(), 1)
			timeout := pgx.StrictNamedArgs{"timeout_ms": fmt.Sprint(ms)}
			if _, err := tx.Exec(ctx, "SELECT set_config('statement_timeout', @timeout_ms, true)", timeout); err != nil {
				return err
			}
		}
		var oldestMS float64
		scan := min(limit, blockedScanLimit)
		err := tx.QueryRow(ctx, s.q.backlog, pgx.StrictNamedArgs{"limit": limit, "any_ordered": s.all || len(s.topics) > 0,
			"all_ordered": s.all, "ordered_topics": s.topics, "blocked_scan": scan}).Scan(
			&b.PendingDue.Rows, &b.PendingDelayed.Rows, &b.Processing.Rows, &b.Failed.Rows, &oldestMS, &b.KeysBlocked)
		if err != nil {
			return err
		}
		b.OldestDue = time.Duration(oldestMS * float64(time.Millisecond))
		counts := []*store.BacklogCount{&b.PendingDue, &b.PendingDelayed, &b.Processing, &b.Failed}
		capped := false
		for _, c := range counts {
			capped = capped || c.Rows >= limit
		}
		if !capped {
			return nil
		}
		var plan []byte
		if err := tx.QueryRow(ctx, s.q.backlogEstimate).Scan(&plan); err != nil {
			return err
		}
		estimates, err := planRows(plan, len(counts))
		if err != nil {
			return err
		}
		for i, c := range counts {
			if c.Rows >= limit {
				c.Rows, c.Estimated = max(estimates[i], limit), true
			}
		}
		return nil
	})
	return b, err
}

// blockedScanLimit is the most delayed rows Backlog reads to find the
// blocked keys: each costs a read of its table row, often from disk.
const blockedScanLimit = 10_000

// planRows returns the estimated rows of each of the n plans under the
// top plan of an EXPLAIN (FORMAT JSON) (backlog_estimate.sql).
func planRows(explain []byte, n int) ([]int64, error) {
	var out []struct {
		Plan struct {
			Plans []struct {
				Rows float64 `json:"Plan Rows"`
			} `json:"Plans"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(explain, &out); err != nil {
		return nil, fmt.Errorf("backlog estimate: %w", err)
	}
	if len(out) != 1 || len(out[0].Plan.Plans) != n {
		return nil, errors.New("backlog estimate: the plan does not have one branch per state")
	}
	rows := make([]int64, n)
	for i, p := range out[0].Plan.Plans {
		rows[i] = int64(p.Rows)
	}
	return rows, nil
}

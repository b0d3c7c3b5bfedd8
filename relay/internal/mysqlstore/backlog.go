package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Backlog reads the Backlog (Relay.Backlog): one statement of bounded
// counts (backlog.sql) and, for each count that reached limit, the
// server's estimate of its range (backlog_estimate.sql). KeysBlocked is
// 0: ordered delivery is PostgreSQL's.
func (s *Store) Backlog(ctx context.Context, limit int64) (store.Backlog, error) {
	var b store.Backlog
	var oldestMS float64
	err := s.db.QueryRowContext(ctx, s.q.backlog, limit, limit, limit, limit).Scan(
		&b.PendingDue.Rows, &b.PendingDelayed.Rows, &b.Processing.Rows, &b.Failed.Rows, &oldestMS)
	if err != nil {
		return store.Backlog{}, err
	}
	b.OldestDue = time.Duration(oldestMS * float64(time.Millisecond))
	for _, c := range []struct {
		count          *store.BacklogCount
		status         string
		fromLowest, to bool // the range of next_retry_at (backlog_estimate.sql)
	}{
		{&b.PendingDue, "pending", true, true},
		{&b.PendingDelayed, "pending", false, false},
		{&b.Processing, "processing", true, false},
		{&b.Failed, "failed", true, false},
	} {
		if c.count.Rows < limit {
			continue
		}
		to := c.to
		if c.status != "pending" {
			to = false // the whole state: from the lowest to the highest
		}
		est, err := s.explainRows(ctx, s.q.backlogEstimate, c.status, c.fromLowest, to)
		if err != nil {
			return store.Backlog{}, fmt.Errorf("backlog estimate: %w", err)
		}
		c.count.Rows, c.count.Estimated = max(est, limit), true
	}
	return b, nil
}

// explainRows runs an EXPLAIN and returns its rows column (its first
// row's), whatever other columns the server adds.
func (s *Store) explainRows(ctx context.Context, q string, args ...any) (int64, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	if !rows.Next() {
		return 0, errors.New("EXPLAIN returned no row")
	}
	vals := make([]sql.NullInt64, len(cols))
	dest := make([]any, len(cols))
	for i := range cols {
		if cols[i] == "rows" {
			dest[i] = &vals[i]
		} else {
			dest[i] = new(sql.RawBytes)
		}
	}
	if err := rows.Scan(dest...); err != nil {
		return 0, err
	}
	for i := range cols {
		if cols[i] == "rows" {
			return vals[i].Int64, rows.Close()
		}
	}
	return 0, errors.New("EXPLAIN has no rows column")
}

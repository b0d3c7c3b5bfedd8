package admin

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// listFailedMySQL is ListFailed on MySQL; after is the canonical cursor.
func (a *Admin) listFailedMySQL(ctx context.Context, f Filter, p Page, after *string) ([]FailedRow, string, error) {
	mf := f.mysql()
	var cursor []byte
	if after != nil {
		u := uuid.MustParse(*after)
		cursor = u[:]
	}
	args := append([]any{p.WithPayload}, mf.args()...)
	args = append(args, cursor, cursor, int64(p.Limit))
	q, err := a.my.QueryContext(ctx, mf.sql(a.q.failedList), args...)
	if err != nil {
		return nil, "", fmt.Errorf("admin: list failed rows: %w", err)
	}
	defer q.Close()
	rows := []FailedRow{}
	for q.Next() {
		var (
			fr              FailedRow
			id, headers     []byte
			created, failed nullTime
		)
		if err := q.Scan(&id, &fr.Topic, &fr.Key, &headers, &fr.Attempt, &fr.LastError, &created, &failed, &fr.PayloadSize, &fr.Payload); err != nil {
			return nil, "", fmt.Errorf("admin: list failed rows: %w", err)
		}
		if fr.ID, err = idString(id); err != nil {
			return nil, "", err
		}
		fr.Headers, fr.CreatedAt, fr.FailedAt = headers, created.UTC(), failed.ptr()
		rows = append(rows, fr)
	}
	if err := q.Err(); err != nil {
		return nil, "", fmt.Errorf("admin: list failed rows: %w", err)
	}
	var next string
	if len(rows) == p.Limit {
		next = rows[len(rows)-1].ID
	}
	a.log.Debug("listed failed rows", "filter", f.describe(), "rows", len(rows))
	return rows, next, nil
}

// countMySQL runs a count statement (failed_count.sql, replay_count.sql)
// with filter mf; state names the rows for the error.
func (a *Admin) countMySQL(ctx context.Context, state, q string, mf mysqlFilter) (int64, error) {
	var n int64
	if err := a.my.QueryRowContext(ctx, mf.sql(q), mf.args()...).Scan(&n); err != nil {
		return 0, fmt.Errorf("admin: count %s rows: %w", state, err)
	}
	return n, nil
}

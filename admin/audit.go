package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/migrations"
)

// AuditEntry is one entry of the audit trail: a change made by
// RetryFailed, PurgeFailed or Replay.
type AuditEntry struct {
	ID int64 `json:"id"`
	// At is when the change committed, by the database clock.
	At time.Time `json:"at"`
	// Actor is who asked (Config.Actor).
	Actor string `json:"actor"`
	// Action is Result.Action: "failed.retry", "failed.purge" or "replay".
	Action string `json:"action"`
	// Filter is the action's filter and options, as JSON.
	Filter json.RawMessage `json:"filter"`
	// Rows counts the rows it changed.
	Rows int64 `json:"rows"`
}

// AuditPage is a page of AuditLog.
type AuditPage struct {
	// Before is the cursor: only entries with a smaller id; 0 or less,
	// from the newest.
	Before int64
	// Limit is the most entries returned. Defaults to 50.
	Limit int
}

// AuditLog returns the audit trail, newest first, a page at a time. next
// is the Before of the next page, 0 after the last one.
func (a *Admin) AuditLog(ctx context.Context, p AuditPage) (entries []AuditEntry, next int64, err error) {
	if p.Limit <= 0 {
		p.Limit = 50
	}
	var before *int64
	if p.Before > 0 {
		before = &p.Before
	}
	if err := a.check(ctx); err != nil {
		return nil, 0, err
	}
	// One entry more than the page tells whether there is a next page.
	if a.my != nil {
		entries, err = a.auditLogMySQL(ctx, before, int64(p.Limit)+1)
	} else {
		entries, err = a.auditLog(ctx, before, int64(p.Limit)+1)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("admin: read the audit trail: %w", err)
	}
	if len(entries) > p.Limit {
		entries = entries[:p.Limit]
		next = entries[p.Limit-1].ID
	}
	a.log.Debug("read the audit trail", "before", p.Before, "entries", len(entries))
	return entries, next, nil
}

func (a *Admin) auditLog(ctx context.Context, before *int64, limit int64) ([]AuditEntry, error) {
	rows, err := a.db.Query(ctx, a.q.auditList, oneShot, before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		var filter []byte
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &filter, &e.Rows)
		e.Filter = filter
		return e, err
	})
}

func (a *Admin) auditLogMySQL(ctx context.Context, before *int64, limit int64) ([]AuditEntry, error) {
	rows, err := a.my.QueryContext(ctx, a.q.auditList, before, before, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	entries := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var at migrations.MySQLTime
		var filter []byte
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &filter, &e.Rows); err != nil {
			return nil, err
		}
		e.At, e.Filter = at.UTC(), filter
		entries = append(entries, e)
	}
	return entries, rows.Err()
}

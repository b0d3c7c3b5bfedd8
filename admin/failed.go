package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailedRow is a failed outbox row.
type FailedRow struct {
	ID    string `json:"id"`
	Topic string `json:"topic"`
	// Key is the row's key (nil: no key); JSON carries it in base64.
	Key     []byte          `json:"key"`
	Headers json.RawMessage `json:"headers"`
	Attempt int             `json:"attempt"`
	// LastError is why it failed; "parked: ..." for events parked by
	// ordered delivery's head-of-line policy.
	LastError string    `json:"last_error"`
	CreatedAt time.Time `json:"created_at"`
	// FailedAt is when the relay marked it failed (nil before migration
	// 007).
	FailedAt    *time.Time `json:"failed_at"`
	PayloadSize int        `json:"payload_size"`
	// Payload is nil unless asked for (Page.WithPayload); JSON carries it
	// in base64.
	Payload []byte `json:"payload,omitempty"`
}

// Page is a page of ListFailed.
type Page struct {
	// After is the cursor: only rows with a larger id. The last id of a
	// full page is the next page's After.
	After string
	// Limit is the most rows returned. Defaults to 50.
	Limit int
	// WithPayload returns the payloads; without it only their sizes
	// travel.
	WithPayload bool
}

// ListFailed returns the failed rows f matches, in id order (roughly write
// order: the writer's ids are UUIDv7), a page at a time. next is the After
// of the next page, "" after the last one.
func (a *Admin) ListFailed(ctx context.Context, f Filter, p Page) (rows []FailedRow, next string, err error) {
	args, err := f.params()
	if err != nil {
		return nil, "", err
	}
	if p.Limit <= 0 {
		p.Limit = 50
	}
	var after *string
	if p.After != "" {
		ids, err := canonicalIDs([]string{p.After})
		if err != nil {
			return nil, "", fmt.Errorf("admin: the cursor: %w", err)
		}
		after = &ids[0]
	}
	if err := a.check(ctx); err != nil {
		return nil, "", err
	}
	f, found, err := a.resolveGroup(ctx, f)
	if err != nil || !found {
		return []FailedRow{}, "", err
	}
	if args, err = f.params(); err != nil {
		return nil, "", err
	}
	if a.my != nil {
		return a.listFailedMySQL(ctx, f, p, after)
	}
	args = append([]any{oneShot}, append(args, after, int64(p.Limit), p.WithPayload)...)
	q, err := a.db.Query(ctx, a.q.failedList, args...)
	if err != nil {
		return nil, "", fmt.Errorf("admin: list failed rows: %w", err)
	}
	rows, err = pgx.CollectRows(q, func(r pgx.CollectableRow) (FailedRow, error) {
		var fr FailedRow
		var headers []byte
		err := r.Scan(&fr.ID, &fr.Topic, &fr.Key, &headers, &fr.Attempt, &fr.LastError, &fr.CreatedAt, &fr.FailedAt, &fr.PayloadSize, &fr.Payload)
		fr.Headers = headers
		return fr, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("admin: list failed rows: %w", err)
	}
	if len(rows) == p.Limit {
		next = rows[len(rows)-1].ID
	}
	a.log.Debug("listed failed rows", "filter", f.describe(), "rows", len(rows))
	return rows, next, nil
}

// CountFailed returns how many failed rows f matches now.
func (a *Admin) CountFailed(ctx context.Context, f Filter) (int64, error) {
	args, err := f.params()
	if err != nil {
		return 0, err
	}
	if err := a.check(ctx); err != nil {
		return 0, err
	}
	f, found, err := a.resolveGroup(ctx, f)
	if err != nil || !found {
		return 0, err
	}
	if args, err = f.params(); err != nil {
		return 0, err
	}
	if a.my != nil {
		return a.countMySQL(ctx, "failed", a.q.failedCount, f.mysql())
	}
	var n int64
	if err := a.db.QueryRow(ctx, a.q.failedCount, append([]any{oneShot}, args...)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("admin: count failed rows: %w", err)
	}
	return n, nil
}

// ActionOptions tune RetryFailed, PurgeFailed and Replay.
type ActionOptions struct {
	// Limit is the most rows changed, the first ones in id order; 0 or
	// less: all the filter matches. The action is one statement in one
	// transaction: on a very large set, a limit keeps each run short. A
	// caller that asked someone to confirm a count passes it here, so
	// that rows matching since are not changed unseen (Result.Left counts
	// them).
	Limit int64
	// DryRun changes nothing and writes no audit entry: the result counts
	// the rows the filter matches now.
	DryRun bool
	// ClearError (RetryFailed only) clears last_error. By default it is
	// kept, so that the reason of the earlier failure stays readable until
	// the row is sent (which clears it) or fails again (which replaces it).
	ClearError bool
}

// RetryFailed puts the failed rows f matches back to pending: due at once,
// attempt 0, failed_at cleared, last_error kept unless o.ClearError. Only
// rows still failed when the statement locks them change; ids given in f
// that were not failed are reported in Result.Skipped. The change and its
// audit entry commit together. In ordered delivery a retried row goes out
// before the later unfinished events of its key and after those already
// sent (docs/ordering.md#parked-and-failed-events).
func (a *Admin) RetryFailed(ctx context.Context, f Filter, o ActionOptions) (Result, error) {
	return a.failedAction(ctx, "failed.retry", a.q.failedRetry, f, o, o.ClearError)
}

// PurgeFailed deletes the failed rows f matches. Only rows still failed
// when the statement locks them are deleted; ids given in f that were not
// failed are reported in Result.Skipped. The deletion and its audit entry
// commit together.
func (a *Admin) PurgeFailed(ctx context.Context, f Filter, o ActionOptions) (Result, error) {
	return a.failedAction(ctx, "failed.purge", a.q.failedPurge, f, o)
}

func (a *Admin) failedAction(ctx context.Context, action, sql string, f Filter, o ActionOptions, extra ...any) (Result, error) {
	if f.empty() && !f.All {
		return Result{Action: action}, fmt.Errorf("admin: %s: %w", action, ErrNoFilter)
	}
	if _, err := f.params(); err != nil {
		return Result{Action: action}, err
	}
	if !o.DryRun && a.cfg.Actor == "" {
		return Result{Action: action}, ErrNoActor
	}
	what := f.describe() // as asked: a group, not the ids it resolves to
	f, found, err := a.resolveGroup(ctx, f)
	if err != nil || !found {
		// An empty group changes nothing, and writes no audit entry.
		return Result{Action: action, DryRun: o.DryRun}, err
	}
	args, err := f.params()
	if err != nil {
		return Result{Action: action}, err
	}
	ids, _ := canonicalIDs(f.IDs)
	if what["group"] != nil {
		ids = nil // not named by the caller: no Skipped for them
	}
	if o.DryRun {
		n, err := a.CountFailed(ctx, f)
		if err != nil {
			return Result{Action: action, DryRun: true}, err
		}
		if a.my != nil {
			return a.dryRunMySQL(ctx, action, n, o.Limit, ids, "failed")
		}
		return a.dryRun(ctx, action, n, o.Limit, ids, "failed")
	}
	if o.Limit > 0 {
		what["limit"] = o.Limit
	}
	if action == "failed.retry" {
		what["clear_error"] = o.ClearError
	}
	if a.my != nil {
		// sql is MySQL's failed_retry.sql or failed_purge.sql: the change
		// of the rows failed_pick.sql locks.
		mf := f.mysql()
		left := remainder{o.Limit, mf.sql(a.q.failedCount), mf.args()}
		return a.changeMySQL(ctx, action, what, ids, nil, left, mf.sql(a.q.failedPick), append(mf.args(), mysqlLimit(o.Limit)), sql, extra...)
	}
	left := remainder{o.Limit, a.q.failedCount, args}
	return a.change(ctx, action, what, ids, nil, left, sql, append(append(args, limitParam(o.Limit)), extra...)...)
}

// limitOr returns limit when positive, else n.
func limitOr(limit, n int64) int64 {
	if limit > 0 {
		return limit
	}
	return n
}

// NotFoundError names the ids Replay was given that the table does not
// hold: the retention janitor deleted them (sent rows are kept for
// --retention), or they never existed. It wraps ErrNotFound.
type NotFoundError struct {
	IDs []string
}

func (e *NotFoundError) Error() string {
	const show = 20
	ids := e.IDs
	more := ""
	if len(ids) > show {
		ids, more = ids[:show], fmt.Sprintf(" and %d more", len(e.IDs)-show)
	}
	noun := "ids are"
	if len(e.IDs) == 1 {
		noun = "id is"
	}
	return fmt.Sprintf("%d %s %s (deleted by retention, or never written), so nothing was replayed: %s%s",
		len(e.IDs), noun, ErrNotFound, strings.Join(ids, ", "), more)
}

// Unwrap returns ErrNotFound.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// isNotFound reports whether err is a NotFoundError.
func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

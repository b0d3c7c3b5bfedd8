package admin

import (
	"context"
	"fmt"
)

// Replay puts the sent rows f matches back to pending, due at once with
// attempt 0, so that the relays publish them again. Each keeps its id,
// which every published message carries (the outbox-event-id header), so
// consumers that drop duplicates by it drop the replayed copies: replay
// is for consumers that lost events or reset what they had seen.
//
// Ids that the table does not hold any more (deleted by retention) fail
// the whole replay with a *NotFoundError naming them, and nothing
// changes. Ids of rows that are not sent (pending, processing, failed) are
// left alone and reported in Result.Skipped. Only rows still sent when
// the statement locks them change; the change and its audit entry commit
// together.
//
// In ordered delivery a replayed row keeps its place in its key's order
// (tx, id), which is before every later event of the key: it goes out
// before the key's events still unfinished and holds them back until it is
// sent, but after the events that were already sent. See
// docs/ordering.md#replaying-sent-events.
func (a *Admin) Replay(ctx context.Context, f ReplayFilter, o ActionOptions) (Result, error) {
	const action = "replay"
	if err := f.validate(); err != nil {
		return Result{Action: action}, err
	}
	args, err := f.params()
	if err != nil {
		return Result{Action: action}, err
	}
	ids, _ := canonicalIDs(f.IDs)
	missing := func(res Result) error {
		var gone []string
		for _, s := range res.Skipped {
			if s.State == "" {
				gone = append(gone, s.ID)
			}
		}
		if len(gone) > 0 {
			return &NotFoundError{IDs: gone}
		}
		return nil
	}
	if o.DryRun {
		n, err := a.CountReplay(ctx, f)
		if err != nil {
			return Result{Action: action, DryRun: true}, err
		}
		dry := a.dryRun
		if a.my != nil {
			dry = a.dryRunMySQL
		}
		res, err := dry(ctx, action, n, o.Limit, ids, "sent")
		if err == nil {
			err = missing(res)
		}
		return res, err
	}
	what := f.describe()
	if o.Limit > 0 {
		what["limit"] = o.Limit
	}
	var res Result
	if a.my != nil {
		mf := f.mysql()
		left := remainder{o.Limit, mf.sql(a.q.replayCount), mf.args()}
		res, err = a.changeMySQL(ctx, action, what, ids, missing, left, mf.sql(a.q.replayPick), append(mf.args(), mysqlLimit(o.Limit)), a.q.replay)
	} else {
		left := remainder{o.Limit, a.q.replayCount, args}
		res, err = a.change(ctx, action, what, ids, missing, left, a.q.replay, append(args, limitParam(o.Limit))...)
	}
	if isNotFound(err) {
		a.log.Warn("replay refused", "error", err)
	}
	return res, err
}

// CountReplay returns how many sent rows f matches now.
func (a *Admin) CountReplay(ctx context.Context, f ReplayFilter) (int64, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	args, err := f.params()
	if err != nil {
		return 0, err
	}
	if err := a.check(ctx); err != nil {
		return 0, err
	}
	if a.my != nil {
		return a.countMySQL(ctx, "sent", a.q.replayCount, f.mysql())
	}
	var n int64
	if err := a.db.QueryRow(ctx, a.q.replayCount, append([]any{oneShot}, args...)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("admin: count sent rows: %w", err)
	}
	return n, nil
}

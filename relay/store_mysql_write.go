package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// deadlockAttempts is how many times a statement or transaction that
// InnoDB chose as a deadlock victim runs in all.
const deadlockAttempts = 3

// onDeadlock runs fn, again while it fails with a deadlock (1213), at most
// deadlockAttempts times. InnoDB rolls back the whole transaction of a
// deadlock victim, so fn starts over from nothing. Deadlocks happen
// between write-backs of rows whose lease lapsed and was taken again:
// two claims each mark their earlier batch sent, and each batch holds a
// row of the other's.
func onDeadlock(fn func() error) error {
	var err error
	for range deadlockAttempts {
		var me *mysql.MySQLError
		if err = fn(); !errors.As(err, &me) || me.Number != 1213 {
			return err
		}
	}
	return err
}

// expand writes n into a statement: {{ids}} becomes n placeholders, and
// {{cases}} n "WHEN ? THEN ?".
func expand(q string, n int) string {
	ids := strings.Repeat("?, ", n)
	cases := strings.Repeat("WHEN ? THEN ? ", n)
	return strings.NewReplacer("{{ids}}", strings.TrimSuffix(ids, ", "), "{{cases}}", strings.TrimSpace(cases)).Replace(q)
}

// idArgs returns ids as the parameters of {{ids}}.
func idArgs[ID ~[16]byte](ids []ID) []any {
	args := make([]any, len(ids))
	for i := range ids {
		args[i] = ids[i][:]
	}
	return args
}

// execer is what execFenced runs on: *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// execFenced runs a fenced write-back over n rows and returns how many
// were fenced out; it does nothing when n is 0. On the pool (not in a
// transaction) a statement that InnoDB picked as a deadlock victim runs
// again (onDeadlock).
func execFenced(ctx context.Context, e execer, what, q string, n int, args ...any) (int, error) {
	if n == 0 {
		return 0, nil
	}
	var res sql.Result
	var err error
	if _, inTx := e.(*sql.Tx); inTx {
		res, err = e.ExecContext(ctx, q, args...)
	} else {
		err = onDeadlock(func() error {
			var err error
			res, err = e.ExecContext(ctx, q, args...)
			return err
		})
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	changed, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n - int(changed), nil
}

// The write-backs return how many of the rows were fenced out: no longer
// held by the claim owner, so left untouched.

// MarkSent marks the rows sent by id; tuple ids are PostgreSQL's.
func (s *mysqlStore) MarkSent(ctx context.Context, owner string, ids []uuid.UUID, _ []store.TID) (fenced int, err error) {
	return execFenced(ctx, s.db, "mark sent", expand(s.q.markSent, len(ids)), len(ids), append(idArgs(ids), owner)...)
}

func (s *mysqlStore) MarkRetry(ctx context.Context, owner string, rs []store.Retry) (fenced int, err error) {
	// Three CASEs (delay, refund, error), the ids, the owner.
	args := make([]any, 0, 7*len(rs)+1)
	for _, r := range rs {
		args = append(args, r.ID[:], r.Delay.Milliseconds())
	}
	for _, r := range rs {
		refund := 0
		if r.Refund {
			refund = 1
		}
		args = append(args, r.ID[:], refund)
	}
	for _, r := range rs {
		args = append(args, r.ID[:], r.Error)
	}
	for _, r := range rs {
		args = append(args, r.ID[:])
	}
	args = append(args, owner)
	return execFenced(ctx, s.db, "mark retry", expand(s.q.markRetry, len(rs)), len(rs), args...)
}

func (s *mysqlStore) MarkFailed(ctx context.Context, owner string, fs []store.Failure) (fenced int, err error) {
	// The CASE of errors, the ids, the owner.
	args := make([]any, 0, 3*len(fs)+1)
	for _, f := range fs {
		args = append(args, f.ID[:], f.Error)
	}
	for _, f := range fs {
		args = append(args, f.ID[:])
	}
	args = append(args, owner)
	return execFenced(ctx, s.db, "mark failed", expand(s.q.markFailed, len(fs)), len(fs), args...)
}

func (s *mysqlStore) Release(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
	return execFenced(ctx, s.db, "release", expand(s.q.release, len(ids)), len(ids), append(idArgs(ids), owner)...)
}

func (s *mysqlStore) Extend(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
	args := append([]any{s.lease.Milliseconds()}, idArgs(ids)...)
	return execFenced(ctx, s.db, "extend lease", expand(s.q.extend, len(ids)), len(ids), append(args, owner)...)
}

// LookBelow returns what a sweep would take, without locking anything:
// up to limit lapsed leases, oldest first, and up to limit due pending
// rows below from, lowest first (look_below.sql). full reports whether
// either branch found limit rows: more may wait behind them. As on
// PostgreSQL, a claim with rg.swept then takes them by id: InnoDB's purge,
// like VACUUM, is held off by an old read view anywhere in the server, and
// the floor keeps the claims off the index entries it leaves behind.
func (s *mysqlStore) LookBelow(ctx context.Context, from store.Floor, limit int) (ids [][16]byte, full bool, err error) {
	due, id := mysqlFloor(from)
	rs, err := s.db.QueryContext(ctx, s.q.lookBelow, limit, due, due, id, limit)
	if err != nil {
		return nil, false, fmt.Errorf("look below the floor: %w", err)
	}
	defer rs.Close()
	var lapsed, below int
	for rs.Next() {
		var raw []byte
		var isLapsed bool
		if err := rs.Scan(&raw, &isLapsed); err != nil {
			return nil, false, fmt.Errorf("look below the floor: %w", err)
		}
		if len(raw) != 16 {
			return nil, false, fmt.Errorf("look below the floor: an id of %d bytes", len(raw))
		}
		ids = append(ids, [16]byte(raw))
		if isLapsed {
			lapsed++
		} else {
			below++
		}
	}
	if err := rs.Err(); err != nil {
		return nil, false, fmt.Errorf("look below the floor: %w", err)
	}
	return ids, lapsed >= limit || below >= limit, nil
}

// CountDue returns the number of due pending rows, or limit when there are
// at least that many.
func (s *mysqlStore) CountDue(ctx context.Context, limit int) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.q.countDue, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("count due rows: %w", err)
	}
	return n, nil
}

// Backlog reads the Backlog (Relay.Backlog): one statement of bounded
// counts (backlog.sql) and, for each count that reached limit, the
// server's estimate of its range (backlog_estimate.sql). KeysBlocked is
// 0: ordered delivery is PostgreSQL's.
func (s *mysqlStore) Backlog(ctx context.Context, limit int64) (store.Backlog, error) {
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
func (s *mysqlStore) explainRows(ctx context.Context, q string, args ...any) (int64, error) {
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

// The retention janitor's statements (store_janitor.go).

package mysqlstore

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The write-backs return how many of the rows were fenced out: no longer
// held by the claim owner, so left untouched.

// MarkSent marks the rows sent by id; tuple ids are PostgreSQL's.
func (s *Store) MarkSent(ctx context.Context, owner string, ids []uuid.UUID, _ []store.TID) (fenced int, err error) {
	return execFenced(ctx, s.db, "mark sent", expand(s.q.markSent, len(ids)), len(ids), append(idArgs(ids), owner)...)
}

// MarkRetry sets the rows back to pending, due after each one's delay,
// with its error; a refunded retry gives the attempt back.
func (s *Store) MarkRetry(ctx context.Context, owner string, rs []store.Retry) (fenced int, err error) {
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

// MarkFailed marks the rows failed, each with its reason.
func (s *Store) MarkFailed(ctx context.Context, owner string, fs []store.Failure) (fenced int, err error) {
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

// Release sets the rows back to pending with their attempt given back:
// claimable at once.
func (s *Store) Release(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
	return execFenced(ctx, s.db, "release", expand(s.q.release, len(ids)), len(ids), append(idArgs(ids), owner)...)
}

// Extend renews the rows' lease by one Lease from now.
func (s *Store) Extend(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
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
func (s *Store) LookBelow(ctx context.Context, from store.Floor, limit int) (ids [][16]byte, full bool, err error) {
	due, id := floorArgs(from)
	rs, err := s.db.QueryContext(ctx, s.q.lookBelow, limit, s.all, s.topics, due, due, id, limit)
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
func (s *Store) CountDue(ctx context.Context, limit int) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.q.countDue, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("count due rows: %w", err)
	}
	return n, nil
}

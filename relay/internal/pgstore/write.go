package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"unsafe"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// pgIDs returns ids as pgx sends them in binary. uuid.UUID is a
// driver.Valuer, which pgx honours by formatting every id as text for the
// server to parse back: that took a quarter of the relay's CPU in a
// burn-down (docs/benchmarks.md#where-the-time-goes).
func pgIDs(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// pgTIDs returns tids as pgx sends them, without copying: store.TID has
// pgtype.TID's fields, so the two share one layout (the conversion of
// &tids[0] below is valid Go only for identical underlying types).
func pgTIDs(tids []store.TID) []pgtype.TID {
	if len(tids) == 0 {
		if tids == nil {
			return nil // NULL
		}
		return []pgtype.TID{}
	}
	return unsafe.Slice((*pgtype.TID)(&tids[0]), len(tids))
}

// pgTime is a store.Time as pgx scans and sends a timestamptz.
type pgTime store.Time

// ScanTimestamptz implements pgtype.TimestamptzScanner.
func (t *pgTime) ScanTimestamptz(v pgtype.Timestamptz) error {
	*t = pgTime{Time: v.Time, Inf: int8(v.InfinityModifier), Valid: v.Valid}
	return nil
}

// TimestamptzValue implements pgtype.TimestamptzValuer.
func (t pgTime) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: t.Time, InfinityModifier: pgtype.InfinityModifier(t.Inf), Valid: t.Valid}, nil
}

// idRange returns the least and the greatest of ids, in PostgreSQL's
// order of uuid (byte by byte), for the write-backs' "id BETWEEN" bound;
// a pair of ids no row has when ids is empty.
func idRange[ID ~[16]byte](ids []ID) (lo, hi [16]byte) {
	if len(ids) == 0 {
		return lo, lo
	}
	lo, hi = ids[0], ids[0]
	for _, id := range ids[1:] {
		if bytes.Compare(id[:], lo[:]) < 0 {
			lo = id
		}
		if bytes.Compare(id[:], hi[:]) > 0 {
			hi = id
		}
	}
	return lo, hi
}

// The write-backs of lease claims return how many of the rows were fenced
// out: no longer held by the claim owner, so left untouched.

// MarkSent marks the rows sent: by their tuple ids when the claim's rows
// were all acknowledged (tids: Row.TID of each), by primary key otherwise.
func (s *Store) MarkSent(ctx context.Context, owner string, ids []uuid.UUID, tids []store.TID) (fenced int, err error) {
	q, args := s.markSentArgs(owner, ids, tids)
	return s.exec(ctx, "mark sent", q, len(ids), args)
}

// markSentArgs returns the mark-sent statement for ids and its arguments.
func (s *Store) markSentArgs(owner string, ids []uuid.UUID, tids []store.TID) (string, pgx.StrictNamedArgs) {
	if len(tids) > 0 && len(tids) == len(ids) {
		return s.q.markSentByTID, pgx.StrictNamedArgs{"tids": pgTIDs(tids), "owner": owner}
	}
	lo, hi := idRange(ids)
	return s.q.markSent, pgx.StrictNamedArgs{"ids": pgIDs(ids), "owner": owner, "lo": lo, "hi": hi}
}

// MarkRetry sets the rows back to pending, due after each one's delay,
// with its error; a refunded retry gives the attempt back.
func (s *Store) MarkRetry(ctx context.Context, owner string, rs []store.Retry) (fenced int, err error) {
	ids, delays, errs, refunds := retryColumns(rs)
	lo, hi := idRange(ids)
	return s.exec(ctx, "mark retry", s.q.markRetry, len(rs), pgx.StrictNamedArgs{"ids": ids, "delays": delays, "errors": errs,
		"refunds": refunds, "owner": owner, "lo": lo, "hi": hi})
}

// MarkFailed marks the rows failed, each with its reason.
func (s *Store) MarkFailed(ctx context.Context, owner string, fs []store.Failure) (fenced int, err error) {
	ids, errs := failureColumns(fs)
	lo, hi := idRange(ids)
	return s.exec(ctx, "mark failed", s.q.markFailed, len(fs), pgx.StrictNamedArgs{"ids": ids, "errors": errs, "owner": owner,
		"lo": lo, "hi": hi})
}

// Release sets the rows back to pending with their attempt given back:
// claimable at once.
func (s *Store) Release(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
	lo, hi := idRange(ids)
	return s.exec(ctx, "release", s.q.release, len(ids), pgx.StrictNamedArgs{"ids": pgIDs(ids), "owner": owner, "lo": lo, "hi": hi})
}

// Extend renews the rows' lease by one Lease from now.
func (s *Store) Extend(ctx context.Context, owner string, ids []uuid.UUID) (fenced int, err error) {
	lo, hi := idRange(ids)
	return s.exec(ctx, "extend lease", s.q.extend, len(ids), pgx.StrictNamedArgs{"ids": pgIDs(ids), "owner": owner,
		"lease_ms": s.lease.Milliseconds(), "lo": lo, "hi": hi})
}

// retryColumns returns retries as the arrays the retry statements unnest.
func retryColumns(rs []store.Retry) (ids [][16]byte, delays []int64, errs []string, refunds []int32) {
	ids, delays, errs, refunds = make([][16]byte, len(rs)), make([]int64, len(rs)), make([]string, len(rs)), make([]int32, len(rs))
	for i, r := range rs {
		ids[i], delays[i], errs[i] = r.ID, r.Delay.Milliseconds(), r.Error
		if r.Refund {
			refunds[i] = 1
		}
	}
	return ids, delays, errs, refunds
}

// failureColumns returns failures as the arrays the failed statements
// unnest.
func failureColumns(fs []store.Failure) (ids [][16]byte, errs []string) {
	ids, errs = make([][16]byte, len(fs)), make([]string, len(fs))
	for i, f := range fs {
		ids[i], errs[i] = f.ID, f.Error
	}
	return ids, errs
}

// CountDue returns the number of due pending rows, or limit when there are
// at least that many.
func (s *Store) CountDue(ctx context.Context, limit int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, s.q.countDue, pgx.StrictNamedArgs{"limit": limit}).Scan(&n)
	return n, err
}

// exec runs a fenced write-back over n rows; it does nothing when n is 0.
func (s *Store) exec(ctx context.Context, what, q string, n int, args pgx.StrictNamedArgs) (int, error) {
	if n == 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, q, args)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n - int(tag.RowsAffected()), nil
}

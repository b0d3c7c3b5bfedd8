package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// DueKeyless reports whether a keyless row is due or a lease has lapsed:
// when every topic is ordered, whether the unordered claim may find a row
// (due_keyless.sql).
func (s *Store) DueKeyless(ctx context.Context) (bool, error) {
	var due bool
	if err := s.pool.QueryRow(ctx, s.q.dueKeyless).Scan(&due); err != nil {
		return false, fmt.Errorf("look for due keyless rows: %w", err)
	}
	return due, nil
}

// Claim takes up to limit unordered rows, within s.bounds, and leases them
// to owner: the rows of rg.Swept that are still due pending rows or
// lapsed leases, then, when rg.Lapsed, rows whose lease ran out (within
// rg.LapsedWithin before now, when that is set), then pending rows from
// rg.From up. In the same transaction and round trip it marks the rows of
// earlier claims in sent sent (relay/sent_batching.go): fenced[i] counts
// the rows of sent[i] that another claim held by then. On an error
// nothing is written.
func (s *Store) Claim(ctx context.Context, owner string, limit int, rg store.ClaimRange, sent []store.SentBatch) (rows []store.Row, fenced []int, err error) {
	partitioned, err := s.isPartitioned(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	b := &pgx.Batch{}
	for _, sb := range sent {
		q, args := s.markSentArgs(sb.Owner, sb.IDs, sb.TIDs)
		b.Queue(q, args)
	}
	bound, err := s.claimBound(ctx, rg.From)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	if bound != nil && len(rg.Swept) > 0 {
		// The rows a look found may lie below it: the update must reach
		// their partitions.
		lo, _ := idRange(rg.Swept)
		if bytes.Compare(lo[:], bound[:]) < 0 {
			bound = &lo
		}
	}
	b.Queue(s.q.claim, s.claimArgs(owner, limit, rg, bound, !partitioned))
	// A batch runs in one implicit transaction, committed after its last
	// statement: Close reports a failure of any of them.
	br := s.pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			rows, fenced, err = nil, nil, fmt.Errorf("claim: %w", cerr)
		}
	}()
	fenced = make([]int, len(sent))
	for i, sb := range sent {
		tag, err := br.Exec()
		if err != nil {
			return nil, nil, fmt.Errorf("claim: mark sent: %w", err)
		}
		fenced[i] = len(sb.IDs) - int(tag.RowsAffected())
	}
	q, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	rows, err = collectRows(q, withDue)
	if err != nil {
		return nil, nil, err
	}
	return rows, fenced, nil
}

// claimArgs are claim.sql's parameters. byTID is false on a partitioned
// table, where a tuple id names a row in each partition.
func (s *Store) claimArgs(owner string, limit int, rg store.ClaimRange, bound *[16]byte, byTID bool) pgx.StrictNamedArgs {
	var lapsedWithin *int64 // every lapsed lease
	if rg.LapsedWithin > 0 {
		ms := rg.LapsedWithin.Milliseconds()
		lapsedWithin = &ms
	}
	return pgx.StrictNamedArgs{"limit": limit, "owner": owner, "lease_ms": s.lease.Milliseconds(),
		"from_due": pgTime(rg.From.Due), "from_id": rg.From.ID, "all_ordered": s.all, "ordered_topics": s.topics,
		"lapsed": rg.Lapsed, "lapsed_within_ms": lapsedWithin, "swept": rg.Swept, "bound": bound,
		"batch_bytes": s.bounds.Batch, "event_bytes": s.bounds.Event, "by_tid": byTID}
}

// LookBelow returns what a sweep would take, without locking anything:
// up to limit lapsed leases, oldest first, up to limit due pending rows
// below from, lowest first, and on a partitioned table up to limit due
// pending rows below the claims' id bound (look_below.sql, claimBound).
// full reports whether any branch found limit rows: more may wait behind
// them.
func (s *Store) LookBelow(ctx context.Context, from store.Floor, limit int) (ids [][16]byte, full bool, err error) {
	bound, err := s.claimBound(ctx, from)
	if err != nil {
		return nil, false, fmt.Errorf("look below the floor: %w", err)
	}
	rows, err := s.pool.Query(ctx, s.q.lookBelow, pgx.StrictNamedArgs{"limit": limit, "from_due": pgTime(from.Due), "from_id": from.ID,
		"all_ordered": s.all, "ordered_topics": s.topics, "bound": bound})
	if err != nil {
		return nil, false, fmt.Errorf("look below the floor: %w", err)
	}
	var found [3]int
	var id [16]byte
	var branch int32
	_, err = pgx.ForEachRow(rows, []any{&id, &branch}, func() error {
		if branch < 0 || int(branch) >= len(found) {
			return fmt.Errorf("branch %d of look_below.sql", branch)
		}
		ids = append(ids, id)
		found[branch]++
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("look below the floor: %w", err)
	}
	return ids, slices.Max(found[:]) >= limit, nil
}

// claimBoundMargin is how far before the floor's time the claims' id
// bound lies: an id is made by the writer's clock, a row's next_retry_at
// by the database's, and a row written by a clock up to this far behind
// is still read by the claims, not left to the looks.
const claimBoundMargin = time.Minute

// claimBound returns the least id the claims from floor read on a
// partitioned table (claim.sql's @bound), so that their plans leave out the
// older partitions: the first id made claimBoundMargin before the floor's
// time. It returns nil (no bound) on an unpartitioned table and for a
// floor at the bottom. The rows below it are the looks' (look_below.sql);
// a claim that takes some lowers its bound to them.
func (s *Store) claimBound(ctx context.Context, from store.Floor) (*[16]byte, error) {
	if !from.Due.Finite() {
		return nil, nil
	}
	if partitioned, err := s.isPartitioned(ctx); err != nil || !partitioned {
		return nil, err
	}
	id := [16]byte(migrations.BoundID(from.Due.Time.Add(-claimBoundMargin)))
	return &id, nil
}

// withDue appends to dest where what a lease claim returns after the
// columns every claim does goes: next_retry_at, for the floor, and the
// tuple id.
func withDue(x *store.Row, dest []any) []any {
	return append(dest, (*pgTime)(&x.Due), (*pgtype.TID)(&x.TID))
}

// collectRows reads claimed rows; extra, when not nil, appends to dest
// where the columns the claim returns after those every claim does go.
func collectRows(rows pgx.Rows, extra func(x *store.Row, dest []any) []any) ([]store.Row, error) {
	claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Row, error) {
		var x store.Row
		// The id as [16]byte: pgx decodes that from binary, whereas
		// uuid.UUID, a sql.Scanner, would go through text.
		dest := append(make([]any, 0, 11), (*[16]byte)(&x.ID), &x.Topic, &x.Key, &x.Payload, &x.Headers, &x.Attempt, (*pgTime)(&x.CreatedAt), &x.Size)
		if extra != nil {
			dest = extra(&x, dest)
		}
		err := r.Scan(dest...)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return claimed, nil
}

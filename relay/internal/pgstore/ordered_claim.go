package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The ordered claim (docs/ordering.md#the-ordered-claim): Go steps over
// statements that each do one thing. Reads decide which rows to take;
// one statement takes them under the shard's lease. Only the lease's
// holder claims the shard's rows, and it claims again only once the last
// claim's outcome is written, so the reads need no lock.

// batcher runs a pgx batch: a pool, or a transaction in tests.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// readRow is a row an ordered claim's read returned: where it lies in
// write order (tx, id), its key, and whether it is ready (of an ordered
// topic and due, or a lapsed claim in flight).
type readRow struct {
	bucket   int16
	tx       int64
	id       [16]byte
	topic    string
	key      []byte
	ready    bool
	inFlight bool // processing: a claim before migration 009
	tid      pgtype.TID
}

// before reports whether a comes before b in write order.
func before(a, b readRow) bool {
	return a.tx < b.tx || a.tx == b.tx && bytes.Compare(a.id[:], b.id[:]) < 0
}

func byWriteOrder(a, b readRow) int {
	switch {
	case before(a, b):
		return -1
	case before(b, a):
		return 1
	}
	return 0
}

// claimWindows are how many rows an ordered claim reads: head of the
// shard's oldest, then first of each bucket, then second in all.
type claimWindows struct{ head, first, second int }

// windowsFor returns the relay's windows for a claim of limit rows over
// buckets buckets (headWindow, firstWindow, secondWindow).
func windowsFor(limit, buckets int) claimWindows {
	return claimWindows{headWindow(limit), firstWindow(limit, buckets), secondWindow(limit)}
}

// ClaimOrdered claims up to limit rows of shard for owner, in write order
// per key; lessee is the token of the shard lease. prior, when not nil,
// is the write-back of the shard's last claim: it is written first, in
// the same transaction and round trip as the claim's first read, so that
// the claim sees its rows sent; got counts its rows, and says whether it
// was written: a claim that fails in a later step has written it. A
// claim whose lease is gone takes nothing.
func (s *Store) ClaimOrdered(ctx context.Context, owner string, limit, shard int, lessee string, prior *store.OrderedWrite) (c store.OrderedClaim, got store.Recorded, err error) {
	buckets := bucketsOf(shard, s.shards)
	return s.claimOrderedIn(ctx, s.pool, owner, limit, shard, lessee, prior, windowsFor(limit, len(buckets)))
}

// claimOrderedIn is claimOrdered on db with the windows w.
func (s *Store) claimOrderedIn(ctx context.Context, db batcher, owner string, limit, shard int, lessee string, prior *store.OrderedWrite, w claimWindows) (c store.OrderedClaim, got store.Recorded, err error) {
	if limit < 1 {
		return store.OrderedClaim{}, store.Recorded{}, fmt.Errorf("claim ordered: a claim of %d rows", limit)
	}
	buckets := bucketsOf(shard, s.shards)
	// Step 1: the shard's oldest rows (and the write-back before them).
	b := &pgx.Batch{}
	s.queueRecord(b, prior, &got)
	var head, inFlight []readRow
	var seen, floor *int64
	b.Queue(s.q.orderedHead, pgx.StrictNamedArgs{"shard": shard, "first_bucket": buckets[0], "last_bucket": buckets[len(buckets)-1],
		"all_topics": s.all, "topics": s.topics, "window": w.head}).Query(func(rows pgx.Rows) error {
		// NULL but for the bounds when it read no row.
		var bucket *int16
		var id *[16]byte
		var topic *string
		var key []byte
		var tx *int64
		var ready, processing *bool
		var tid pgtype.TID
		_, err := pgx.ForEachRow(rows, []any{&bucket, &id, &topic, &key, &tx, &ready, &processing, &tid, &seen, &floor}, func() error {
			if bucket == nil {
				return nil
			}
			x := readRow{bucket: *bucket, id: *id, topic: *topic, key: slices.Clone(key), tx: *tx, ready: *ready, inFlight: *processing, tid: tid}
			if x.inFlight {
				inFlight = append(inFlight, x)
			} else {
				head = append(head, x)
			}
			return nil
		})
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return store.OrderedClaim{}, store.Recorded{}, fmt.Errorf("claim ordered: %w", err)
	}
	got.Written = prior != nil
	read := func(buckets []int16, perBucket, total int) ([]readRow, error) {
		return s.readBuckets(ctx, db, buckets, perBucket, total)
	}
	picked, err := pickOrdered(limit, w, buckets, head, inFlight, read)
	if err != nil {
		return store.OrderedClaim{}, got, fmt.Errorf("claim ordered: %w", err)
	}
	// The rows are the shard's oldest when they are the first rows read,
	// with nothing in flight before them.
	prefix := s.all && len(inFlight) == 0 && len(picked) <= len(head) && slices.EqualFunc(picked, head[:len(picked)],
		func(a, b readRow) bool { return a.id == b.id })
	// Step 2: take them.
	rows, err := s.take(ctx, db, owner, shard, lessee, picked, seen, floor)
	if err != nil {
		return store.OrderedClaim{}, got, fmt.Errorf("claim ordered: %w", err)
	}
	return store.OrderedClaim{Rows: rows, Prefix: prefix}, got, nil
}

// pickOrdered returns the up to limit oldest claimable rows, in write
// order, from the shard's oldest rows head and its rows in flight,
// reading bucket by bucket (read) when head does not decide. A row is
// claimable when it and every earlier unfinished row of its key are
// ready. Each read is a prefix of the shard's or of a bucket's pending
// rows in write order, so the runs over it are the runs over the whole
// backlog up to its last row (its cut), as long as rows in flight past
// the cut are left out; docs/ordering.md says why these passes.
func pickOrdered(limit int, w claimWindows, buckets []int16, head, inFlight []readRow,
	read func(buckets []int16, perBucket, total int) ([]readRow, error)) ([]readRow, error) {
	// Pass 0: decided when the read reached the end of the shard or found
	// limit claimable rows.
	cut := map[int16]readRow{}
	if len(head) >= w.head {
		for _, b := range buckets {
			cut[b] = head[len(head)-1]
		}
	}
	found := claimable(head, inFlight, cut)
	if len(head) < w.head || len(found) >= limit {
		return found[:min(limit, len(found))], nil
	}
	// Pass 1: the first rows of every bucket, each cut at its last row
	// when it read a full window.
	first, err := read(buckets, w.first, w.first*len(buckets))
	if err != nil {
		return nil, err
	}
	firstCuts := cutsOf(first, w.first)
	found = claimable(first, inFlight, firstCuts)
	// Pass 2: the buckets cut before the limit-th claimable row found
	// (every cut bucket when fewer were found) may hold older claimable
	// rows past their cut: read them again, oldest cut first, second rows
	// in all.
	var again []int16
	for b, c := range firstCuts {
		if len(found) < limit || before(c, found[limit-1]) {
			again = append(again, b)
		}
	}
	if len(again) == 0 {
		return found[:min(limit, len(found))], nil
	}
	slices.SortFunc(again, func(a, b int16) int { return byWriteOrder(firstCuts[a], firstCuts[b]) })
	second, err := read(again, w.second, w.second)
	if err != nil {
		return nil, err
	}
	// Stopped at the total: each bucket read is cut at its last row.
	secondCuts := map[int16]readRow{}
	if len(second) >= w.second {
		secondCuts = cutsOf(second, 1)
	}
	reread := map[int16]bool{}
	for _, x := range second {
		reread[x.bucket] = true
	}
	var keep, inReread []readRow
	for _, x := range found {
		if !reread[x.bucket] {
			keep = append(keep, x)
		}
	}
	for _, x := range inFlight {
		if reread[x.bucket] {
			inReread = append(inReread, x)
		}
	}
	found = append(keep, claimable(second, inReread, secondCuts)...)
	slices.SortFunc(found, byWriteOrder)
	return found[:min(limit, len(found))], nil
}

// cutsOf returns the last row read of each bucket of rows that has at
// least full rows: rows past it were not read.
func cutsOf(rows []readRow, full int) map[int16]readRow {
	n := map[int16]int{}
	last := map[int16]readRow{}
	for _, x := range rows {
		n[x.bucket]++
		if y, ok := last[x.bucket]; !ok || before(y, x) {
			last[x.bucket] = x
		}
	}
	cuts := map[int16]readRow{}
	for b, c := range n {
		if c >= full {
			cuts[b] = last[b]
		}
	}
	return cuts
}

// claimable returns the claimable rows of pending and inFlight, in write
// order: each key's ready rows up to its first that is not. A row in
// flight past its bucket's cut is left out, and so is one pending read
// again since (a claim before migration 009 released it).
func claimable(pending, inFlight []readRow, cuts map[int16]readRow) []readRow {
	ids := map[[16]byte]bool{}
	for _, x := range pending {
		ids[x.id] = true
	}
	all := slices.Clone(pending)
	for _, x := range inFlight {
		if c, ok := cuts[x.bucket]; (!ok || !before(c, x)) && !ids[x.id] {
			all = append(all, x)
		}
	}
	slices.SortFunc(all, byWriteOrder)
	type key struct{ topic, key string }
	blocked := map[key]bool{}
	var out []readRow
	for _, x := range all {
		k := key{x.topic, string(x.key)}
		switch {
		case blocked[k]:
		case !x.ready:
			blocked[k] = true
		default:
			out = append(out, x)
		}
	}
	return out
}

// readBuckets reads buckets in their order, up to perBucket rows of each
// and total in all (ordered_buckets.sql).
func (s *Store) readBuckets(ctx context.Context, db batcher, buckets []int16, perBucket, total int) ([]readRow, error) {
	var out []readRow
	b := &pgx.Batch{}
	b.Queue(s.q.orderedBuckets, pgx.StrictNamedArgs{"buckets": buckets, "per_bucket": perBucket, "total": total,
		"all_topics": s.all, "topics": s.topics}).Query(func(rows pgx.Rows) error {
		var x readRow
		_, err := pgx.ForEachRow(rows, []any{&x.bucket, &x.id, &x.topic, &x.key, &x.tx, &x.ready, &x.tid}, func() error {
			x.key = slices.Clone(x.key)
			out = append(out, x)
			return nil
		})
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("read buckets: %w", err)
	}
	return out, nil
}

// take takes picked under the shard's lease (ordered_take.sql) and
// returns the rows, in write order, up to the first it did not return:
// the byte bound's, or one no longer where the read saw it (its key's
// later rows must not go before it). seen and floor are what the first
// read found of the shard's floor.
func (s *Store) take(ctx context.Context, db batcher, owner string, shard int, lessee string, picked []readRow, seen, floor *int64) ([]store.Row, error) {
	partitioned, err := s.isPartitioned(ctx)
	if err != nil {
		return nil, fmt.Errorf("take: %w", err)
	}
	ids := make([][16]byte, len(picked))
	tids := make([]pgtype.TID, len(picked))
	var revive [][16]byte
	for i, x := range picked {
		ids[i], tids[i] = x.id, x.tid
		if x.inFlight {
			revive = append(revive, x.id)
		}
	}
	lo, hi := idRange(ids)
	var got []store.Row
	b := &pgx.Batch{}
	b.Queue(s.q.orderedTake, pgx.StrictNamedArgs{"shard": shard, "lessee": lessee, "owner": owner, "lease_ms": s.lease.Milliseconds(),
		"ids": ids, "tids": tids, "by_tid": !partitioned, "revive": revive, "lo": lo, "hi": hi, "seen": seen, "floor": floor,
		"batch_bytes": s.bounds.Batch, "event_bytes": s.bounds.Event}).Query(func(rows pgx.Rows) (err error) {
		got, err = collectRows(rows, func(x *store.Row, dest []any) []any { return append(dest, &x.Tx, (*pgtype.TID)(&x.TID)) })
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("take: %w", err)
	}
	byID := make(map[[16]byte]store.Row, len(got))
	for _, x := range got {
		byID[x.ID] = x
	}
	rows := make([]store.Row, 0, len(got))
	for _, x := range picked {
		r, ok := byID[x.id]
		if !ok {
			break
		}
		rows = append(rows, r)
	}
	return rows, nil
}

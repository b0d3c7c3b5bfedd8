package mysqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The ordered claim (docs/ordering.md#mysql-and-mariadb). The trigger
// numbers a key's events in commit order (seq), so the first pending row
// of a key, by seq, has no earlier unfinished row that may still commit:
// a key's claimable rows are its run of due pending rows from its first,
// none of them after a row of the key in flight on the unordered path.
// The reads go key by key through a shard's buckets (ordered_idx), from
// after the key the last claim looked at, round to it again, so that
// every key of the shard is served in turn. Only the lease holder claims,
// and only once the last claim's outcome is written, so the reads lock
// nothing.

// key is where a key lies in ordered_idx: its bucket, hash and topic.
type key struct {
	bucket int
	khash  []byte
	topic  string
}

func (k key) same(o key) bool {
	return k.bucket == o.bucket && k.topic == o.topic && bytes.Equal(k.khash, o.khash)
}

// pendingRow is a row an ordered read returned.
type pendingRow struct {
	key
	id  uuid.UUID
	seq int64
	due bool
}

// ClaimOrdered claims up to limit rows of shard for owner, in seq order
// per key; lessee is the token of the shard lease. prior, when not nil,
// is the shard's last write-back, written first (got counts it). A claim
// whose lease is gone takes nothing.
func (s *Store) ClaimOrdered(ctx context.Context, owner string, limit, shard int, lessee string, prior *store.OrderedWrite) (c store.OrderedClaim, got store.Recorded, err error) {
	if limit < 1 {
		return store.OrderedClaim{}, store.Recorded{}, fmt.Errorf("claim ordered: a claim of %d rows", limit)
	}
	if prior != nil {
		if got, err = s.RecordOrdered(ctx, *prior); err != nil {
			return store.OrderedClaim{}, store.Recorded{}, err
		}
		got.Written = true
	}
	var cb sql.NullInt64
	var ch []byte
	var ct sql.NullString
	err = s.db.QueryRowContext(ctx, s.q.shardHeld, shard, lessee).Scan(&cb, &ch, &ct)
	if errors.Is(err, sql.ErrNoRows) {
		return store.OrderedClaim{}, got, nil
	}
	if err != nil {
		return store.OrderedClaim{}, got, fmt.Errorf("claim ordered: %w", err)
	}
	var from *key
	if cb.Valid {
		from = &key{int(cb.Int64), ch, ct.String}
	}
	picked, last, err := s.pick(ctx, shard, limit, from)
	if err != nil {
		return store.OrderedClaim{}, got, fmt.Errorf("claim ordered: %w", err)
	}
	var rows []store.Row
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err = s.take(ctx, tx, shard, lessee, picked, last)
		return err
	})
	if err != nil {
		return store.OrderedClaim{}, got, fmt.Errorf("claim ordered: %w", err)
	}
	// No floor to raise: the reads start at each key's first pending row.
	return store.OrderedClaim{Rows: rows}, got, nil
}

// pick returns up to limit claimable rows of shard, key by key from after
// from (nil: the shard's start), and the last key it looked at.
func (s *Store) pick(ctx context.Context, shard, limit int, from *key) (picked []pendingRow, last *key, err error) {
	lo, hi := s.bucketRange(shard)
	inFlight, err := s.inFlight(ctx, lo, hi)
	if err != nil {
		return nil, nil, err
	}
	start, end := key{bucket: lo - 1}, key{bucket: hi + 1}
	passes := [][2]key{{start, end}}
	if from != nil {
		passes = [][2]key{{*from, end}, {start, *from}}
	}
	window := limit + limit/4 + 16
	budget := min(max(16*limit, 4096), 64*limit) // rows read in all
	read := 0
	for _, p := range passes {
		after := p[0]
		for len(picked) < limit && read < budget {
			n := min(window, budget-read)
			rows, err := s.readPending(ctx, lo, hi, after, p[1], n)
			if err != nil {
				return nil, nil, err
			}
			read += len(rows)
			for i := 0; i < len(rows) && len(picked) < limit; {
				j := i + 1
				for j < len(rows) && rows[j].same(rows[i].key) {
					j++
				}
				picked = append(picked, run(rows[i:j], inFlight, limit-len(picked))...)
				k := rows[i].key
				after, last = k, &k
				i = j
			}
			if len(rows) < n {
				break // the end of the pass
			}
		}
	}
	return picked, last, nil
}

// run returns up to n rows of a key's pending rows (in seq order, from its
// first): those due, up to its first that is not or that comes after the
// key's least seq in flight (inFlight).
func run(rows []pendingRow, inFlight map[string]int64, n int) []pendingRow {
	stop, blocked := inFlight[string(rows[0].khash)+"\x00"+rows[0].topic]
	var out []pendingRow
	for _, x := range rows {
		if !x.due || blocked && x.seq > stop || len(out) == n {
			break
		}
		out = append(out, x)
	}
	return out
}

// inFlight returns, for each key of buckets lo to hi with a row in flight
// on the unordered path, its least seq in flight.
func (s *Store) inFlight(ctx context.Context, lo, hi int) (map[string]int64, error) {
	rs, err := s.db.QueryContext(ctx, s.q.orderedProcessing, lo, hi)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	m := map[string]int64{}
	for rs.Next() {
		var topic string
		var h []byte
		var seq int64
		if err := rs.Scan(&topic, &h, &seq); err != nil {
			return nil, err
		}
		m[string(h)+"\x00"+topic] = seq
	}
	return m, rs.Err()
}

// readPending reads up to n pending rows of buckets lo to hi, key by key,
// of the keys after after up to and including upto (ordered_read.sql).
func (s *Store) readPending(ctx context.Context, lo, hi int, after, upto key, n int) ([]pendingRow, error) {
	rs, err := s.db.QueryContext(ctx, s.q.orderedRead, lo, hi, s.all, s.topics,
		after.bucket, after.bucket, after.khash, after.khash, after.topic,
		upto.bucket, upto.bucket, upto.khash, upto.khash, upto.topic, n)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []pendingRow
	for rs.Next() {
		var x pendingRow
		var id []byte
		if err := rs.Scan(&id, &x.topic, &x.bucket, &x.khash, &x.seq, &x.due); err != nil {
			return nil, err
		}
		if len(id) != 16 {
			return nil, fmt.Errorf("an id of %d bytes", len(id))
		}
		x.id = uuid.UUID(id)
		out = append(out, x)
	}
	return out, rs.Err()
}

// take takes picked under the shard's lease, in tx: if lessee still holds
// it, it renews it, notes the rows and last (the key the next claim
// starts after), and returns the rows, in picked order, up to the first
// no longer pending or the byte bound (a key's later rows must not go
// without it). Otherwise it takes nothing.
func (s *Store) take(ctx context.Context, tx *sql.Tx, shard int, lessee string, picked []pendingRow, last *key) ([]store.Row, error) {
	var b sql.NullInt64
	var h []byte
	var t sql.NullString
	if err := tx.QueryRowContext(ctx, s.q.shardHeld, shard, lessee).Scan(&b, &h, &t); errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var rows []store.Row
	if len(picked) > 0 {
		ids := make([]uuid.UUID, len(picked))
		for i, x := range picked {
			ids[i] = x.id
		}
		byID, err := s.takeRows(ctx, tx, ids)
		if err != nil {
			return nil, err
		}
		size := 0
		for _, id := range ids {
			r, ok := byID[id]
			if !ok || size >= s.bounds.Batch {
				break
			}
			if !s.bounds.TooLarge(&r) {
				size += int(r.Size)
			}
			rows = append(rows, r)
		}
		if err := s.readRows(ctx, tx, rows); err != nil {
			return nil, err
		}
	}
	taken := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		taken[i] = r.ID
	}
	var cur key
	var curBucket any
	if last != nil {
		cur, curBucket = *last, last.bucket
	}
	if _, err := tx.ExecContext(ctx, s.q.shardTake, s.lease.Milliseconds(), joinIDs(taken), curBucket, cur.khash, cur.topic, shard); err != nil {
		return nil, err
	}
	return rows, nil
}

// takeRows reads the rows ids that are still pending, without their key,
// payload and headers (ordered_take.sql).
func (s *Store) takeRows(ctx context.Context, tx *sql.Tx, ids []uuid.UUID) (map[uuid.UUID]store.Row, error) {
	rs, err := tx.QueryContext(ctx, expand(s.q.orderedTake, len(ids)), idArgs(ids)...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	byID := make(map[uuid.UUID]store.Row, len(ids))
	for rs.Next() {
		var r store.Row
		var id []byte
		var created migrations.MySQLTime
		if err := rs.Scan(&id, &r.Topic, &r.Size, &r.Attempt, &created, &r.Tx); err != nil {
			return nil, err
		}
		if len(id) != 16 {
			return nil, fmt.Errorf("an id of %d bytes", len(id))
		}
		r.ID = uuid.UUID(id)
		r.CreatedAt = store.Time{Time: created.Time, Valid: true}
		byID[r.ID] = r
	}
	return byID, rs.Err()
}

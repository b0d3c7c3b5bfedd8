package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// Ordered delivery on MySQL and MariaDB (docs/ordering.md#mysql-and-mariadb):
// shard leases and the write-backs they fence. The claim is ordered_claim.go's.

var _ store.Shards = (*Store)(nil)

// errNotPrepared means the table lacks the trigger that numbers a key's
// events.
var errNotPrepared = errors.New("ordered topics on MySQL/MariaDB need the table prepared by `relay migrate up --ordered` (docs/ordering.md#mysql-and-mariadb)")

// buckets is the number of hash buckets keys fall into (migration 005);
// shard s of P owns those with bucket * P / buckets = s.
const buckets = 1024

// orderedTopics returns the parameters naming the ordered topics: all
// of them, or those matching one of the JSON array's LIKE patterns
// (store.OrderedTopics), which the statements read with JSON_TABLE.
func orderedTopics(ordered []string) (all bool, like string) {
	all, patterns := store.OrderedTopics(ordered)
	b, _ := json.Marshal(patterns) // strings always marshal
	return all, string(b)
}

// bucketRange returns the first and last bucket of shard.
func (s *Store) bucketRange(shard int) (lo, hi int) {
	first := func(x int) int { return (x*buckets + s.shards - 1) / s.shards }
	return first(shard), first(shard+1) - 1
}

// EnsureShards checks that the table is prepared for ordered delivery,
// creates the shard rows when there are none, and checks that their
// number is shards.
func (s *Store) EnsureShards(ctx context.Context, shards int) error {
	if ok, err := s.Prepared(ctx); err != nil || !ok {
		return cmpErr(err, errNotPrepared)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, s.q.shardCount).Scan(&n); err != nil {
		return fmt.Errorf("count shards: %w", err)
	}
	if n == 0 {
		args := make([]any, shards)
		for i := range args {
			args[i] = i
		}
		q := strings.Replace(s.q.shardCreate, "{{values}}", strings.TrimSuffix(strings.Repeat("(?), ", shards), ", "), 1)
		if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("create shards: %w", err)
		}
		if err := s.db.QueryRowContext(ctx, s.q.shardCount).Scan(&n); err != nil {
			return fmt.Errorf("count shards: %w", err)
		}
	}
	if n != shards {
		return fmt.Errorf("shard count mismatch: the shard table holds %d shards, this relay is configured for %d; every replica must use the same shard count (to change it, stop all replicas and empty the shard table)", n, shards)
	}
	return nil
}

// cmpErr returns err, or else fallback.
func cmpErr(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}

// Prepared reports whether the table has the trigger that numbers a key's
// events (migrations.PrepareOrderedMySQL).
func (s *Store) Prepared(ctx context.Context) (bool, error) {
	return migrations.OrderedPreparedMySQL(ctx, s.db, s.table)
}

// LeaseShard leases to owner a free shard with a due row of an ordered
// topic, lapsed leases first, then the least recently served; ok is false
// when none is free. A shard another lease or write-back holds locked is
// passed over.
func (s *Store) LeaseShard(ctx context.Context, owner string) (shard int, ok bool, err error) {
	free, err := s.freeShards(ctx)
	if err != nil {
		return 0, false, err
	}
	for _, shard := range free {
		lo, hi := s.bucketRange(shard)
		var work int
		if err := s.db.QueryRowContext(ctx, s.q.orderedWork, lo, hi, s.all, s.topics).Scan(&work); err != nil {
			return 0, false, fmt.Errorf("lease shard: %w", err)
		}
		if work == 0 {
			continue
		}
		err := onDeadlock(func() error {
			var err error
			ok, err = s.leaseOnce(ctx, shard, owner)
			return err
		})
		if err != nil || ok {
			return shard, ok, err
		}
	}
	return 0, false, nil
}

// freeShards lists the shards whose lease ended, in lease order.
func (s *Store) freeShards(ctx context.Context) ([]int, error) {
	rs, err := s.db.QueryContext(ctx, s.q.shardFree)
	if err != nil {
		return nil, fmt.Errorf("lease shard: %w", err)
	}
	defer rs.Close()
	var free []int
	for rs.Next() {
		var x int
		if err := rs.Scan(&x); err != nil {
			return nil, fmt.Errorf("lease shard: %w", err)
		}
		free = append(free, x)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("lease shard: %w", err)
	}
	return free, nil
}

// leaseOnce leases shard to owner if it is still free and unlocked, and
// counts an attempt for the rows its last holder claimed without outcome.
func (s *Store) leaseOnce(ctx context.Context, shard int, owner string) (bool, error) {
	tx, err := s.db.BeginTx(ctx, claimTx)
	if err != nil {
		return false, fmt.Errorf("lease shard: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var claimed []byte
	if err := tx.QueryRowContext(ctx, s.q.shardLock, shard).Scan(&claimed); errors.Is(err, sql.ErrNoRows) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("lease shard: %w", err)
	}
	if ids := splitIDs(claimed); len(ids) > 0 {
		if _, err := tx.ExecContext(ctx, expand(s.q.shardCountAttempt, len(ids)), idArgs(ids)...); err != nil {
			return false, fmt.Errorf("lease shard: count attempts: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q.shardLease, owner, s.lease.Milliseconds(), shard); err != nil {
		return false, fmt.Errorf("lease shard: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("lease shard: commit: %w", err)
	}
	return true, nil
}

// joinIDs returns ids as the shard row's claimed: 16 bytes each, NULL
// for none.
func joinIDs(ids []uuid.UUID) []byte {
	if len(ids) == 0 {
		return nil
	}
	b := make([]byte, 0, 16*len(ids))
	for _, id := range ids {
		b = append(b, id[:]...)
	}
	return b
}

// splitIDs reads the shard row's claimed.
func splitIDs(b []byte) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(b)/16)
	for ; len(b) >= 16; b = b[16:] {
		ids = append(ids, uuid.UUID(b[:16]))
	}
	return ids
}

// ExtendShard renews owner's lease of shard; held is false when owner no
// longer holds it.
func (s *Store) ExtendShard(ctx context.Context, shard int, owner string) (held bool, err error) {
	res, err := s.db.ExecContext(ctx, s.q.shardExtend, s.lease.Milliseconds(), shard, owner)
	if err != nil {
		return false, fmt.Errorf("extend shard %d: %w", shard, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("extend shard %d: %w", shard, err)
	}
	return n > 0, nil
}

// RecordOrdered writes w in a transaction of its own; nothing once
// w.Lessee no longer holds the shard.
func (s *Store) RecordOrdered(ctx context.Context, w store.OrderedWrite) (got store.Recorded, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		got, err = s.record(ctx, tx, &w)
		return err
	})
	if err != nil {
		return store.Recorded{}, fmt.Errorf("record ordered outcome: %w", err)
	}
	return got, nil
}

// HandBack returns shard, leased by owner, with prior written first in
// the same transaction when it is not nil. On an error nothing is written.
func (s *Store) HandBack(ctx context.Context, shard int, owner string, prior *store.OrderedWrite) (got store.Recorded, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if prior != nil {
			if got, err = s.record(ctx, tx, prior); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, s.q.shardHandBack, shard, owner)
		return err
	})
	if err != nil {
		return store.Recorded{}, fmt.Errorf("hand back shard %d: %w", shard, err)
	}
	return got, nil
}

// inTx runs fn in a transaction and commits, again if InnoDB picked it as
// a deadlock victim.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	return onDeadlock(func() error {
		tx, err := s.db.BeginTx(ctx, claimTx)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit()
	})
}

// record writes w in tx, fenced by the shard lease: it locks the shard
// row if w.Lessee holds it (a takeover waits, then sees the outcome) and
// writes nothing otherwise. The claim left its rows pending; each stores
// the attempt the claim returned.
func (s *Store) record(ctx context.Context, tx *sql.Tx, w *store.OrderedWrite) (got store.Recorded, err error) {
	var b sql.NullInt64
	var h []byte
	var t sql.NullString
	if err := tx.QueryRowContext(ctx, s.q.shardHeld, w.Shard, w.Lessee).Scan(&b, &h, &t); errors.Is(err, sql.ErrNoRows) {
		return store.Recorded{}, nil
	} else if err != nil {
		return store.Recorded{}, err
	}
	out := w.Out
	exec := func(q string, n int, args ...any) (int, error) {
		if n == 0 {
			return 0, nil
		}
		res, err := tx.ExecContext(ctx, expand(q, n), args...)
		if err != nil {
			return 0, err
		}
		changed, err := res.RowsAffected()
		return int(changed), err
	}
	if got.Sent, err = exec(s.q.recordOrdered, len(out.Sent), append([]any{w.Owner}, idArgs(out.Sent)...)...); err != nil {
		return store.Recorded{}, err
	}
	var args []any
	for _, r := range out.Retries {
		args = append(args, r.ID[:], r.Delay.Milliseconds())
	}
	for _, r := range out.Retries {
		refund := 0
		if r.Refund {
			refund = 1
		}
		args = append(args, r.ID[:], refund)
	}
	for _, r := range out.Retries {
		args = append(args, r.ID[:], r.Error)
	}
	args = append(args, w.Owner)
	for _, r := range out.Retries {
		args = append(args, r.ID[:])
	}
	if got.Retried, err = exec(s.q.recordOrderedRetried, len(out.Retries), args...); err != nil {
		return store.Recorded{}, err
	}
	args = args[:0]
	for _, f := range out.Failures {
		args = append(args, f.ID[:], f.Error)
	}
	args = append(args, w.Owner)
	for _, f := range out.Failures {
		args = append(args, f.ID[:])
	}
	if got.Failed, err = exec(s.q.recordOrderedFailed, len(out.Failures), args...); err != nil {
		return store.Recorded{}, err
	}
	if _, err := tx.ExecContext(ctx, s.q.recordOrderedShard, joinIDs(w.Unknown), w.Shard); err != nil {
		return store.Recorded{}, err
	}
	return got, nil
}

// DueKeyless reports whether a row without seq is due or a lease has
// lapsed: when every topic is ordered, whether an unordered claim may
// find a row.
func (s *Store) DueKeyless(ctx context.Context) (bool, error) {
	var due bool
	if err := s.db.QueryRowContext(ctx, s.q.dueKeyless).Scan(&due); err != nil {
		return false, fmt.Errorf("due keyless: %w", err)
	}
	return due, nil
}

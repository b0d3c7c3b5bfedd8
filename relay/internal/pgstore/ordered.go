package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// The store's statements of ordered delivery (docs/ordering.md).

// errShardCount means the shard table was made for another shard count.
var errShardCount = errors.New("shard count mismatch")

// EnsureShards creates the shard rows when there are none, and checks that
// their number is the configured one.
func (s *Store) EnsureShards(ctx context.Context, shards int) error {
	var n int
	if err := s.pool.QueryRow(ctx, s.q.shardCount).Scan(&n); err != nil {
		return fmt.Errorf("count shards: %w", err)
	}
	if n == 0 {
		if _, err := s.pool.Exec(ctx, s.q.shardCreate, pgx.StrictNamedArgs{"shards": shards}); err != nil {
			return fmt.Errorf("create shards: %w", err)
		}
		if err := s.pool.QueryRow(ctx, s.q.shardCount).Scan(&n); err != nil {
			return fmt.Errorf("count shards: %w", err)
		}
	}
	if n != shards {
		return fmt.Errorf("%w: the shard table holds %d shards, this relay is configured for %d; every replica must use the same shard count (to change it, stop all replicas and empty the shard table)", errShardCount, n, shards)
	}
	return nil
}

// Prepared is migrations.OrderedPrepared on the table.
func (s *Store) Prepared(ctx context.Context) (bool, error) {
	return migrations.OrderedPrepared(ctx, s.pool, s.table)
}

// LeaseShard leases a shard with work to owner; ok is false when none is
// free.
func (s *Store) LeaseShard(ctx context.Context, owner string) (shard int, ok bool, err error) {
	err = s.pool.QueryRow(ctx, s.q.leaseShard, pgx.StrictNamedArgs{"lessee": owner, "lease_ms": s.lease.Milliseconds(), "shards": s.shards,
		"all_ordered": s.all, "ordered_topics": s.topics}).Scan(&shard)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lease shard: %w", err)
	}
	return shard, true, nil
}

// HandBack returns shard, leased by owner. prior, when not nil, is the
// write-back of the shard's last claim, written first in the same
// transaction and round trip; got counts its rows. On an error nothing is
// written.
func (s *Store) HandBack(ctx context.Context, shard int, owner string, prior *store.OrderedWrite) (got store.Recorded, err error) {
	b := &pgx.Batch{}
	s.queueRecord(b, prior, &got)
	b.Queue(s.q.handBack, pgx.StrictNamedArgs{"shard": shard, "lessee": owner})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return store.Recorded{}, fmt.Errorf("hand back shard %d: %w", shard, err)
	}
	return got, nil
}

// ExtendShard renews owner's lease of shard; held is false when owner no
// longer holds it.
func (s *Store) ExtendShard(ctx context.Context, shard int, owner string) (held bool, err error) {
	tag, err := s.pool.Exec(ctx, s.q.extendShard, pgx.StrictNamedArgs{"shard": shard, "lessee": owner, "lease_ms": s.lease.Milliseconds()})
	if err != nil {
		return false, fmt.Errorf("extend shard %d: %w", shard, err)
	}
	return tag.RowsAffected() > 0, nil
}

// RecordOrdered writes w on its own. It writes nothing once w.Lessee no
// longer holds the shard.
func (s *Store) RecordOrdered(ctx context.Context, w store.OrderedWrite) (got store.Recorded, err error) {
	b := &pgx.Batch{}
	s.queueRecord(b, &w, &got)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return store.Recorded{}, fmt.Errorf("record ordered outcome: %w", err)
	}
	return got, nil
}

// queueRecord queues the write-back w in b, when w is not nil: its sent
// rows (record_ordered.sql), then its retried and failed rows, when it
// has any (record_ordered_retried.sql); its counts are scanned into got.
func (s *Store) queueRecord(b *pgx.Batch, w *store.OrderedWrite, got *store.Recorded) {
	if w == nil {
		return
	}
	out := w.Out
	retried, delays, errs, refunds := retryColumns(out.Retries)
	failed, failErrs := failureColumns(out.Failures)
	sent := pgIDs(out.Sent)
	lo, hi := idRange(slices.Concat(sent, retried, failed))
	args := pgx.StrictNamedArgs{"shard": w.Shard, "lessee": w.Lessee, "owner": w.Owner, "sent": sent, "lo": lo, "hi": hi,
		"unknown": pgIDs(w.Unknown), "tids": pgTIDs(w.TIDs), "raise": w.Raise}
	b.Queue(s.q.recordOrdered, args).QueryRow(func(row pgx.Row) error { return row.Scan(&got.Sent) })
	if len(retried) == 0 && len(failed) == 0 {
		return
	}
	b.Queue(s.q.recordOrderedRetried, pgx.StrictNamedArgs{"shard": w.Shard, "lessee": w.Lessee, "owner": w.Owner, "lo": lo, "hi": hi,
		"retried": retried, "delays": delays, "errors": errs, "refunds": refunds, "failed": failed, "fail_errors": failErrs,
	}).QueryRow(func(row pgx.Row) error { return row.Scan(&got.Retried, &got.Failed) })
}

// firstWindow is how many pending rows of each of its buckets a claim of
// limit rows reads first (pickOrdered): twice a bucket's share of
// limit when the oldest rows are spread evenly over the buckets, plus 8,
// and never more than limit. A bucket that holds more than that of the
// oldest rows is read again, up to limit rows, so the window only sets
// how often that second read happens, never which rows are claimed.
func firstWindow(limit, buckets int) int {
	return min(limit, 8+(2*limit+buckets-1)/max(buckets, 1))
}

// secondWindow is how many rows a claim of limit rows reads in all in its
// last pass (pickOrdered), bucket by bucket: so far past a key whose
// head is not ready it looks for the keys behind it in its bucket. It is
// 16 batches' worth, at least 4,096 rows (a few milliseconds to read), and
// never more than 64 batches' worth: a claim that timed out halves the
// next (batchSizer.timedOut), and the next reads in proportion less.
func secondWindow(limit int) int {
	return min(max(16*limit, 4096), 64*limit)
}

// headWindow is how many of the shard's oldest pending rows a claim of
// limit rows reads first, in write order across its buckets
// (ordered_head.sql): the claim, a quarter more for rows that are not
// claimable (retrying, or behind a key's row in flight), and 16 for small
// claims. When the read does not find limit claimable rows before its
// last row, the claim reads bucket by bucket instead, so the window only
// sets how often that happens, never which rows are claimed.
func headWindow(limit int) int {
	return limit + limit/4 + 16
}

// Buckets is the number of hash buckets keys fall into (migration 008);
// shards group them.
const Buckets = 1024

// bucketsOf lists the buckets of shard, in order: those with
// bucket * shards / Buckets = shard, a contiguous range (migration 008).
func bucketsOf(shard, shards int) []int16 {
	var b []int16
	for x := firstBucket(shard, shards); x < firstBucket(shard+1, shards); x++ {
		b = append(b, int16(x))
	}
	return b
}

// firstBucket is the first bucket of shard: ceil(shard * Buckets / shards).
func firstBucket(shard, shards int) int {
	return (shard*Buckets + shards - 1) / shards
}

package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The store's statements of ordered delivery (docs/ordering.md).

// errShardCount means the shard table was made for another Ordering.Shards.
var errShardCount = errors.New("shard count mismatch")

// ensureShards creates the shard rows when there are none, and checks that
// their number is the configured one.
func (s *pgStore) ensureShards(ctx context.Context, shards int) error {
	var n int
	if err := s.pool.QueryRow(ctx, s.q.shardCount).Scan(&n); err != nil {
		return fmt.Errorf("count shards: %w", err)
	}
	if n == 0 {
		if _, err := s.pool.Exec(ctx, s.q.shardCreate, shards); err != nil {
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

// leaseShard leases a shard with work to owner; ok is false when none is
// free.
func (s *pgStore) leaseShard(ctx context.Context, owner string) (shard int, ok bool, err error) {
	all, topics := s.orderedTopics()
	err = s.pool.QueryRow(ctx, s.q.leaseShard, s.lease.Milliseconds(), owner, s.ordering.Shards, all, topics).Scan(&shard)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("lease shard: %w", err)
	}
	return shard, true, nil
}

// handBack returns shard, leased by owner. prior, when not nil, is the
// write-back of the shard's last claim, written first in the same
// transaction and round trip; got counts its rows. On an error nothing is
// written.
func (s *pgStore) handBack(ctx context.Context, shard int, owner string, prior *orderedWrite) (got recorded, err error) {
	b := &pgx.Batch{}
	s.queueRecord(b, prior, &got)
	b.Queue(s.q.handBack, shard, owner)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return recorded{}, fmt.Errorf("hand back shard %d: %w", shard, err)
	}
	return got, nil
}

// extendShard renews owner's lease of shard; held is false when owner no
// longer holds it.
func (s *pgStore) extendShard(ctx context.Context, shard int, owner string) (held bool, err error) {
	tag, err := s.pool.Exec(ctx, s.q.extendShard, shard, owner, s.lease.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("extend shard %d: %w", shard, err)
	}
	return tag.RowsAffected() > 0, nil
}

// orderedClaim is what an ordered claim took.
type orderedClaim struct {
	rows []row
	// prefix reports that rows are the shard's oldest pending rows, in
	// write order, with every topic ordered (head_fast in
	// claim_ordered.sql): once they are all sent, none of the shard's
	// rows below the last one's transaction is pending (raise).
	prefix bool
}

// raise returns the transaction the write-back of c may raise its shard's
// floor to when its outcome is out: the last row's, when c took the
// shard's oldest rows and every one of them was sent; nil otherwise, so
// that the floor stays below a row retried, released or without outcome.
func (c orderedClaim) raise(out *outcome) *int64 {
	if !c.prefix || len(c.rows) == 0 || len(out.sent) != len(c.rows) {
		return nil
	}
	top := c.rows[0].tx
	for _, x := range c.rows {
		top = max(top, x.tx)
	}
	return &top
}

// claimOrdered claims up to limit rows of shard for owner, in write order
// per key; lessee is the token of the shard lease. prior, when not nil,
// is the write-back of the shard's last claim: it is written first, in
// the same transaction and round trip as the claim's first statement, so
// that the claim sees its rows sent; got counts its rows. On an error
// nothing is written.
func (s *pgStore) claimOrdered(ctx context.Context, owner string, limit, shard int, lessee string, prior *orderedWrite) (c orderedClaim, got recorded, err error) {
	fast, head, whole := s.q.claimOrderedFast, s.q.claimOrderedHead, s.q.claimOrdered
	switch partitioned, err := s.isPartitioned(ctx); {
	case err != nil:
		return orderedClaim{}, recorded{}, fmt.Errorf("claim ordered: %w", err)
	case partitioned:
		fast, head, whole = s.q.claimOrderedFastPartitioned, s.q.claimOrderedHeadPartitioned, s.q.claimOrderedPartitioned
	}
	all, topics := s.orderedTopics()
	buckets := bucketsOf(shard, s.ordering.Shards)
	args := []any{limit, owner, s.lease.Milliseconds(), shard, lessee, buckets, all, topics, headWindow(limit),
		firstWindow(limit, len(buckets)), s.bytes.batch, s.bytes.event}
	// Each statement reads on where the one before took nothing: the
	// shard's oldest rows were not all claimable, or the read of its
	// oldest rows did not decide the claim, or there was nothing to take.
	b := &pgx.Batch{}
	s.queueRecord(b, prior, &got)
	queueClaim(b, &c, fast, args...)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil || len(c.rows) > 0 {
		return c, got, wrapClaim(err)
	}
	if c, err = s.claimOrderedWith(ctx, head, args...); err != nil || len(c.rows) > 0 {
		return c, got, err
	}
	c, err = s.claimOrderedWith(ctx, whole, append(args, secondWindow(limit))...)
	return c, got, err
}

// claimOrderedWith runs one of the ordered claim's statements.
func (s *pgStore) claimOrderedWith(ctx context.Context, claim string, args ...any) (c orderedClaim, err error) {
	b := &pgx.Batch{}
	queueClaim(b, &c, claim, args...)
	return c, wrapClaim(s.pool.SendBatch(ctx, b).Close())
}

// queueClaim queues one of the ordered claim's statements in b, its rows
// read into c.
func queueClaim(b *pgx.Batch, c *orderedClaim, claim string, args ...any) {
	b.Queue(claim, args...).Query(func(rows pgx.Rows) (err error) {
		c.rows, err = collectRows(rows, func(x *row, dest []any) []any { return append(dest, &x.tx, &x.tid, &c.prefix) })
		return err
	})
}

// wrapClaim names the ordered claim in err, when err is not nil.
func wrapClaim(err error) error {
	if err != nil {
		return fmt.Errorf("claim ordered: %w", err)
	}
	return nil
}

// recorded counts the rows an ordered write-back wrote, by outcome.
type recorded struct{ sent, retried, failed int }

// orderedWrite is the write-back of an ordered claim (record_ordered.sql):
// the outcome out of the claim owner of shard, leased by lessee.
type orderedWrite struct {
	shard         int
	lessee, owner string
	out           *outcome
	// tids are where the claim read its rows (none on a partitioned
	// table): the statement finds the sent rows among them by id, and by
	// primary key those it does not find there.
	tids []pgtype.TID
	// unknown are the claimed rows whose publish has no outcome.
	unknown []uuid.UUID
	// raise, when not nil, is the transaction the shard's floor rises to
	// (orderedClaim.raise).
	raise *int64
}

// recordOrdered writes w on its own. It writes nothing once w.lessee no
// longer holds the shard.
func (s *pgStore) recordOrdered(ctx context.Context, w orderedWrite) (got recorded, err error) {
	b := &pgx.Batch{}
	s.queueRecord(b, &w, &got)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return recorded{}, fmt.Errorf("record ordered outcome: %w", err)
	}
	return got, nil
}

// queueRecord queues the write-back w in b, when w is not nil; its counts
// are scanned into got.
func (s *pgStore) queueRecord(b *pgx.Batch, w *orderedWrite, got *recorded) {
	if w == nil {
		return
	}
	record, args := s.recordStatement(w)
	b.Queue(record, args...).QueryRow(func(row pgx.Row) error {
		return row.Scan(&got.sent, &got.retried, &got.failed)
	})
}

// recordStatement returns the statement that writes w and its arguments:
// record_ordered.sql, without its retried and failed updates when the
// outcome has neither (sentOnly).
func (s *pgStore) recordStatement(w *orderedWrite) (string, []any) {
	out := w.out
	retried, delays, errs, refunds := retryColumns(out.retries)
	failed, failErrs := failureColumns(out.failures)
	sent := pgIDs(out.sent)
	lo, hi := idRange(slices.Concat(sent, retried, failed))
	record := s.q.recordOrdered
	if len(retried) == 0 && len(failed) == 0 {
		record = s.q.recordOrderedSent
	}
	return record, []any{w.shard, w.lessee, w.owner, sent,
		retried, delays, errs, refunds, failed, failErrs, lo, hi, pgIDs(w.unknown), w.tids, w.raise}
}

// firstWindow is how many pending rows of each of its buckets a claim of
// limit rows reads first (claim_ordered.sql): twice a bucket's share of
// limit when the oldest rows are spread evenly over the buckets, plus 8,
// and never more than limit. A bucket that holds more than that of the
// oldest rows is read again, up to limit rows, so the window only sets
// how often that second read happens, never which rows are claimed.
func firstWindow(limit, buckets int) int {
	return min(limit, 8+(2*limit+buckets-1)/max(buckets, 1))
}

// secondWindow is how many rows a claim of limit rows reads in all in its
// last pass (claim_ordered.sql), bucket by bucket: so far past a key whose
// head is not ready it looks for the keys behind it in its bucket. It is
// 16 batches' worth, at least 4,096 rows (a few milliseconds to read), and
// never more than 64 batches' worth: a claim that timed out halves the
// next (batchSizer.timedOut), and the next reads in proportion less.
func secondWindow(limit int) int {
	return min(max(16*limit, 4096), 64*limit)
}

// headWindow is how many of the shard's oldest pending rows a claim of
// limit rows reads first, in write order across its buckets
// (claim_ordered.sql): the claim, a quarter more for rows that are not
// claimable (retrying, or behind a key's row in flight), and 16 for small
// claims. When the read does not find limit claimable rows before its
// last row, the claim reads bucket by bucket instead, so the window only
// sets how often that happens, never which rows are claimed.
func headWindow(limit int) int {
	return limit + limit/4 + 16
}

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

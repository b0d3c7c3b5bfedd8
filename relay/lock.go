package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lock claims (ClaimLock): the claim locks its rows in a transaction that
// stays open while they are published, and the outcome is written in that
// transaction. Nothing is written before the publish, so an event costs one
// row version instead of two (docs/architecture.md#claim-modes). The rows'
// lock is the fence: no other claim or write-back can touch them until the
// transaction ends, and it ends with the session if the relay dies or is
// frozen past its lease.

// orderedFilterLocked is orderedFilter for claimLockedSQL, whose
// parameters after the limit are the ordered topics.
var orderedFilterLocked = strings.NewReplacer("$6", "$2", "$7", "$3").Replace(orderedFilter)

// claimLockedSQL picks the rows claimSQL would and locks them without
// writing: lapsed leases of lease claims first, then due pending rows. It
// returns the attempt this claim makes, which the outcome records.
var claimLockedSQL = `SELECT id, topic, key, payload, headers, least(attempt, 2147483646) + 1, created_at FROM (
    SELECT * FROM (
        SELECT id, topic, key, payload, headers, attempt, created_at
        FROM {{table}}
        WHERE status = 'processing'
          AND locked_until < now()
          ` + orderedFilterLocked + `
        ORDER BY locked_until
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS expired
    UNION ALL
    SELECT * FROM (
        SELECT id, topic, key, payload, headers, attempt, created_at
        FROM {{table}}
        WHERE status = 'pending'
          AND next_retry_at <= now()
          ` + orderedFilterLocked + `
        ORDER BY next_retry_at, id
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS due
    LIMIT $1
) AS picked`

// The outcome statements of a lock claim. They run in the claim's
// transaction, on rows it holds locked, so they need no fence; each
// records the attempt ($owner is kept in locked_by as a record of who
// handled the row last). Rows left alone (released) are unchanged when the
// transaction commits: claimable again at once, attempt untouched.
const (
	lockedSentSQL = `UPDATE {{table}}
SET status = 'sent',
    sent_at = now(),
    attempt = least(attempt, 2147483646) + 1,
    locked_by = $2,
    locked_until = NULL,
    last_error = NULL
WHERE id = ANY($1)`

	lockedRetrySQL = `UPDATE {{table}} AS o
SET status = 'pending',
    next_retry_at = now() + r.delay_ms * interval '1 millisecond',
    attempt = least(o.attempt, 2147483646) + 1 - r.refund,
    last_error = r.error,
    locked_by = $5,
    locked_until = NULL
FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[]) AS r(id, delay_ms, error, refund)
WHERE o.id = r.id`

	lockedFailedSQL = `UPDATE {{table}} AS o
SET status = 'failed',
    attempt = least(o.attempt, 2147483646) + 1,
    last_error = r.error,
    locked_by = $3,
    locked_until = NULL
FROM unnest($1::uuid[], $2::text[]) AS r(id, error)
WHERE o.id = r.id`
)

// processLocked is ProcessBatch for ClaimLock: the claim, the publish and
// the outcome share one transaction on one connection. hard is the batch's
// shutdown bound: as with a lease claim, the statements outlive ctx.
func (r *Relay) processLocked(ctx, hard context.Context, owner string, limit int, published func()) (BatchResult, error) {
	cctx, cancel := context.WithTimeout(hard, r.cfg.Lease)
	defer cancel()
	start := time.Now()
	conn, err := r.pool.Acquire(cctx)
	if err != nil {
		return BatchResult{}, fmt.Errorf("claim: %w", err)
	}
	// The pool closes a connection released inside a transaction, and the
	// server then rolls the transaction back.
	defer conn.Release()
	rows, err := r.store.claimLocked(cctx, conn, limit)
	if err == nil {
		r.observe(Event{Kind: EventClaimed, Claim: ClaimLock, Rows: len(rows), Duration: time.Since(start)})
	}
	if err != nil || len(rows) == 0 {
		rollback(hard, conn)
		return BatchResult{}, err
	}
	res := BatchResult{Claimed: len(rows)}
	ph := phases{mode: ClaimLock, claim: time.Since(start)}
	// Any statement restarts the server's idle timer: that is the lease's
	// renewal while the publish runs.
	renew := func(ctx context.Context) (int, error) {
		_, err := conn.Exec(ctx, "SELECT 1")
		return 0, err
	}
	out := r.publishClaimed(ctx, hard, rows, renew, &res, &ph)
	if published != nil {
		published()
	}
	start = time.Now()
	wctx, wcancel := context.WithTimeout(hard, r.cfg.Lease)
	defer wcancel()
	if err := r.store.recordLocked(wctx, conn, owner, &out, &res); err != nil {
		rollback(hard, conn)
		return res, fmt.Errorf("record outcome of %d claimed rows: %w; the claim's transaction is over, so they are claimable again (those published will be published again)", res.Claimed, err)
	}
	ph.record = time.Since(start)
	r.logBatch(res, ph, out.retries, out.failures)
	return res, nil
}

// rollback ends the transaction on conn, if it can within 5s and hard;
// otherwise the pool closes the connection when it is released, which ends
// it too.
func rollback(hard context.Context, conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(hard, 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, "ROLLBACK")
}

// claimLocked opens a transaction on conn with the lock claim's settings
// (among them an idle timeout of one lease) and locks up to limit unordered
// rows in it; one round trip.
func (s *store) claimLocked(ctx context.Context, conn *pgxpool.Conn, limit int) ([]row, error) {
	var args []any
	if all, topics := s.orderedTopics(); !all {
		args = []any{limit, all, topics}
	} else {
		args = []any{limit}
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.sql["lockSettings"])
	b.Queue(s.sql["claimLocked"], args...)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return collectRows(rows, noExtra)
}

// recordLocked writes a lock claim's outcome and commits, in one round trip,
// and counts it in res. Nothing is retried: once a statement fails the
// transaction is lost.
func (s *store) recordLocked(ctx context.Context, conn *pgxpool.Conn, owner string, out *outcome, res *BatchResult) error {
	b := &pgx.Batch{}
	var counts []*int
	var sizes []int
	queue := func(count *int, n int, name string, args ...any) {
		if n > 0 {
			b.Queue(s.sql[name], args...)
			counts, sizes = append(counts, count), append(sizes, n)
		}
	}
	queue(&res.Sent, len(out.sent), "lockedSent", pgIDs(out.sent), owner)
	rids, delays, errs, refunds := retryColumns(out.retries)
	queue(&res.Retried, len(out.retries), "lockedRetry", rids, delays, errs, refunds, owner)
	fids, ferrs := failureColumns(out.failures)
	queue(&res.Failed, len(out.failures), "lockedFailed", fids, ferrs, owner)
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	for i := range counts {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		*counts[i] = int(tag.RowsAffected())
		res.Fenced += sizes[i] - *counts[i]
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = errors.New("the transaction was rolled back at commit")
	}
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	res.Released = len(out.released)
	return nil
}

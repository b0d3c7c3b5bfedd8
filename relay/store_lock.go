package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockedRows are rows a lock claim (ClaimLock) holds: locked in a
// transaction that stays open on one connection while they are published,
// and in which their outcome is written. The rows' lock is the fence: no
// other claim or write-back can touch them until the transaction ends, and
// it ends with the session if the relay dies or is frozen past its lease
// (the server's idle_in_transaction_session_timeout, set to the lease).
type lockedRows struct {
	s    *pgStore
	conn *pgxpool.Conn
	rows []Row
}

// ClaimLocked opens a transaction on a connection of its own with the lock
// claim's settings and locks up to limit unordered rows in it, returning
// those within s.bytes; one round trip. The caller ends it with record or rollback, and then calls close.
func (s *pgStore) ClaimLocked(ctx context.Context, limit int) (*lockedRows, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	all, topics := s.orderedTopics()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.lockSettings)
	b.Queue(s.q.claimLocked, limit, all, topics, s.bytes.Batch, s.bytes.Event)
	br := conn.SendBatch(ctx, b)
	rows, err := func() ([]Row, error) {
		defer br.Close()
		for range 2 {
			if _, err := br.Exec(); err != nil {
				return nil, fmt.Errorf("claim: %w", err)
			}
		}
		q, err := br.Query()
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		return collectRows(q, nil)
	}()
	l := &lockedRows{s: s, conn: conn, rows: rows}
	if err != nil {
		l.rollback(ctx)
		l.close()
		return nil, err
	}
	return l, nil
}

// renew keeps the claim: any statement restarts the server's idle timer.
// It runs in the claim's transaction, which a cancelled statement would
// abort, so callers let it finish.
func (l *lockedRows) renew(ctx context.Context) (lost int, err error) {
	_, err = l.conn.Exec(ctx, "SELECT 1")
	return 0, err
}

// record writes the outcome and commits, in one round trip, and counts it
// in res. Nothing is retried: once a statement fails the transaction is
// lost, and the rows are claimable again.
func (l *lockedRows) record(ctx context.Context, owner string, out *outcome, res *BatchResult) error {
	b := &pgx.Batch{}
	var counts []*int
	var sizes []int
	queue := func(count *int, n int, q string, args ...any) {
		if n > 0 {
			b.Queue(q, args...)
			counts, sizes = append(counts, count), append(sizes, n)
		}
	}
	queue(&res.Sent, len(out.Sent), l.s.q.lockedSent, pgIDs(out.Sent), owner)
	rids, delays, errs, refunds := retryColumns(out.Retries)
	queue(&res.Retried, len(out.Retries), l.s.q.lockedRetry, rids, delays, errs, refunds, owner)
	fids, ferrs := failureColumns(out.Failures)
	queue(&res.Failed, len(out.Failures), l.s.q.lockedFailed, fids, ferrs, owner)
	b.Queue("COMMIT")
	br := l.conn.SendBatch(ctx, b)
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

// rollback ends the transaction, if it can within 5s and hard; otherwise
// the pool closes the connection when it is released, which ends it too.
func (l *lockedRows) rollback(hard context.Context) {
	ctx, cancel := context.WithTimeout(hard, 5*time.Second)
	defer cancel()
	_, _ = l.conn.Exec(ctx, "ROLLBACK")
}

// close returns the connection. The pool closes a connection released
// inside a transaction, and the server then rolls the transaction back.
func (l *lockedRows) close() { l.conn.Release() }

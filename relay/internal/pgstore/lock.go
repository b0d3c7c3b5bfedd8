package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outboxrelay/relay/internal/store"
)

// lockedRows are rows a lock claim (ClaimLock) holds: locked in a
// transaction that stays open on one connection while they are published,
// and in which their outcome is written. The rows' lock is the fence: no
// other claim or write-back can touch them until the transaction ends, and
// it ends with the session if the relay dies or is frozen past its lease
// (the server's idle_in_transaction_session_timeout, set to the lease).
type lockedRows struct {
	s    *Store
	conn *pgxpool.Conn
	rows []store.Row
}

// ClaimLocked opens a transaction on a connection of its own with the lock
// claim's settings and locks up to limit unordered rows in it, returning
// those within s.bounds; one round trip. The caller ends it with record or rollback, and then calls close.
func (s *Store) ClaimLocked(ctx context.Context, limit int) (store.Locked, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.lockSettings)
	b.Queue(s.q.claimLocked, pgx.StrictNamedArgs{"limit": limit, "all_ordered": s.all, "ordered_topics": s.topics,
		"batch_bytes": s.bounds.Batch, "event_bytes": s.bounds.Event})
	br := conn.SendBatch(ctx, b)
	rows, err := func() ([]store.Row, error) {
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
		l.Rollback(ctx)
		l.Close()
		return nil, err
	}
	return l, nil
}

// Rows are the rows the claim locked.
func (l *lockedRows) Rows() []store.Row { return l.rows }

// Renew keeps the claim: any statement restarts the server's idle timer.
// It runs in the claim's transaction, which a cancelled statement would
// abort, so callers let it finish.
func (l *lockedRows) Renew(ctx context.Context) error {
	_, err := l.conn.Exec(ctx, "SELECT 1")
	return err
}

// Record writes the outcome and commits, in one round trip; got counts
// the rows it wrote. Nothing is retried: once a statement fails the
// transaction is lost, and the rows are claimable again.
func (l *lockedRows) Record(ctx context.Context, owner string, out store.Outcome) (got store.Recorded, err error) {
	b := &pgx.Batch{}
	var counts []*int
	queue := func(count *int, n int, q string, args pgx.StrictNamedArgs) {
		if n > 0 {
			b.Queue(q, args)
			counts = append(counts, count)
		}
	}
	queue(&got.Sent, len(out.Sent), l.s.q.lockedSent, pgx.StrictNamedArgs{"ids": pgIDs(out.Sent), "owner": owner})
	rids, delays, errs, refunds := retryColumns(out.Retries)
	queue(&got.Retried, len(out.Retries), l.s.q.lockedRetry, pgx.StrictNamedArgs{"ids": rids, "delays": delays, "errors": errs,
		"refunds": refunds, "owner": owner})
	fids, ferrs := failureColumns(out.Failures)
	queue(&got.Failed, len(out.Failures), l.s.q.lockedFailed, pgx.StrictNamedArgs{"ids": fids, "errors": ferrs, "owner": owner})
	b.Queue("COMMIT")
	br := l.conn.SendBatch(ctx, b)
	defer br.Close()
	for _, count := range counts {
		tag, err := br.Exec()
		if err != nil {
			return store.Recorded{}, err
		}
		*count = int(tag.RowsAffected())
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = errors.New("the transaction was rolled back at commit")
	}
	if err != nil {
		return store.Recorded{}, fmt.Errorf("commit: %w", err)
	}
	got.Written = true
	return got, nil
}

// Rollback ends the transaction, if it can within 5s and hard; otherwise
// the pool closes the connection when it is released, which ends it too.
func (l *lockedRows) Rollback(hard context.Context) {
	ctx, cancel := context.WithTimeout(hard, 5*time.Second)
	defer cancel()
	_, _ = l.conn.Exec(ctx, "ROLLBACK")
}

// Close returns the connection. The pool closes a connection released
// inside a transaction, and the server then rolls the transaction back.
func (l *lockedRows) Close() { l.conn.Release() }

package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// holdSnapshot opens a REPEATABLE READ transaction on a connection of its
// own and runs a query in it, so that the transaction holds a snapshot, and
// with it the database's VACUUM horizon, until release: what a long
// analytics query, pg_dump or a session left idle in a transaction does to
// the outbox table (Config.HoldSnapshot). Without HoldSnapshot it holds
// nothing.
func (r *runner) holdSnapshot(ctx context.Context) (release func(), err error) {
	if !r.cfg.HoldSnapshot {
		return func() {}, nil
	}
	conn, err := pgx.Connect(ctx, r.cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("hold snapshot: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err == nil {
		var n int64
		err = tx.QueryRow(ctx, "SELECT count(*) FROM "+r.table.Ident()).Scan(&n)
	}
	if err != nil {
		conn.Close(context.Background()) //nolint:errcheck // the query's error is the one to report
		return nil, fmt.Errorf("hold snapshot: %w", err)
	}
	return func() {
		tx.Rollback(context.Background()) //nolint:errcheck // closing the connection ends it anyway
		conn.Close(context.Background())  //nolint:errcheck // nothing to do about it
	}, nil
}

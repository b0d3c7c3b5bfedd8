package outbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SQLExecutor is the part of *sql.Tx (and *sql.DB, *sql.Conn) that FromSQL
// needs. Transactions of sqlx, bun, ent and GORM expose an *sql.Tx or this
// surface.
type SQLExecutor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// FromSQL adapts a database/sql transaction to Executor, so applications on
// database/sql (with the pgx stdlib driver or lib/pq) can call Write inside
// their own transaction:
//
//	tx, _ := db.BeginTx(ctx, nil)
//	_, err := outbox.Write(ctx, outbox.FromSQL(tx), msg)
func FromSQL(tx SQLExecutor) Executor { return sqlExecutor{tx} }

type sqlExecutor struct{ tx SQLExecutor }

func (s sqlExecutor) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	res, err := s.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, fmt.Errorf("rows affected: %w", err)
	}
	return pgconn.NewCommandTag(fmt.Sprintf("INSERT 0 %d", n)), nil
}

func (s sqlExecutor) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return s.tx.QueryRowContext(ctx, query, args...)
}

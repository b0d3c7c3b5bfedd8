package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// How the store's statements run: lists of rows written into them,
// fenced write-backs counted, deadlock victims run again.

// deadlockAttempts is how many times a statement or transaction that
// InnoDB chose as a deadlock victim runs in all.
const deadlockAttempts = 3

// onDeadlock runs fn, again while it fails with a deadlock (1213), at most
// deadlockAttempts times. InnoDB rolls back the whole transaction of a
// deadlock victim, so fn starts over from nothing. Deadlocks happen
// between write-backs of rows whose lease lapsed and was taken again:
// two claims each mark their earlier batch sent, and each batch holds a
// row of the other's.
func onDeadlock(fn func() error) error {
	var err error
	for range deadlockAttempts {
		var me *mysql.MySQLError
		if err = fn(); !errors.As(err, &me) || me.Number != 1213 {
			return err
		}
	}
	return err
}

// expand writes n into a statement: {{ids}} becomes n placeholders, and
// {{cases}} n "WHEN ? THEN ?".
func expand(q string, n int) string {
	ids := strings.Repeat("?, ", n)
	cases := strings.Repeat("WHEN ? THEN ? ", n)
	return strings.NewReplacer("{{ids}}", strings.TrimSuffix(ids, ", "), "{{cases}}", strings.TrimSpace(cases)).Replace(q)
}

// idArgs returns ids as the parameters of {{ids}}.
func idArgs[ID ~[16]byte](ids []ID) []any {
	args := make([]any, len(ids))
	for i := range ids {
		args[i] = ids[i][:]
	}
	return args
}

// execer is what execFenced runs on: *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// execFenced runs a fenced write-back over n rows and returns how many
// were fenced out; it does nothing when n is 0. On the pool (not in a
// transaction) a statement that InnoDB picked as a deadlock victim runs
// again (onDeadlock).
func execFenced(ctx context.Context, e execer, what, q string, n int, args ...any) (int, error) {
	if n == 0 {
		return 0, nil
	}
	var res sql.Result
	var err error
	if _, inTx := e.(*sql.Tx); inTx {
		res, err = e.ExecContext(ctx, q, args...)
	} else {
		err = onDeadlock(func() error {
			var err error
			res, err = e.ExecContext(ctx, q, args...)
			return err
		})
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	changed, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n - int(changed), nil
}

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// MySQLExecutor is the part of *sql.Tx (and *sql.DB, *sql.Conn) that
// FromMySQL needs.
type MySQLExecutor interface {
	SQLExecutor
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// FromMySQL adapts a database/sql transaction on MySQL 8 or MariaDB 10.6+
// (driver github.com/go-sql-driver/mysql) to Executor. The Writer then
// speaks MySQL through it: ? placeholders, multi-row INSERT, ids as
// BINARY(16), and duplicates detected without RETURNING.
//
//	tx, _ := db.BeginTx(ctx, nil)
//	_, err := outbox.Write(ctx, outbox.FromMySQL(tx), msg)
//
// On MySQL the Writer's Table.Schema is a database name; left empty (as
// by default) it means the connection's current database, so the default
// Writer writes to `outbox` there (not to a database called "public").
//
// Write and WriteBatch keep their PostgreSQL contract: the same
// validation and typed errors, and a message whose ID or DedupKey is
// already in the table is not written again, Result.Duplicate is true and
// Result.ID is the existing row's. The driver's clientFoundRows must stay
// false (the default), or a duplicate of a message with a caller-set ID
// and no DedupKey is reported as written. Dedup keys compare by the
// table's collation, which ignores trailing spaces (docs/mysql.md).
func FromMySQL(tx MySQLExecutor) Executor { return mysqlExecutor{tx} }

// mysqlExecutor marks a MySQL transaction: the Writer sees it and takes
// the MySQL path (writeMySQL) on the wrapped executor. Its Exec and
// QueryRow, which the Writer never calls, pass statements through.
type mysqlExecutor struct{ tx MySQLExecutor }

func (m mysqlExecutor) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	return sqlExecutor{m.tx}.Exec(ctx, query, args...)
}

func (m mysqlExecutor) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return m.tx.QueryRowContext(ctx, query, args...)
}

// Bounds of one MySQL INSERT: rows (7 parameters each, far below the
// 65,535-placeholder limit) and bytes of payload, key and headers, so that
// a statement stays well inside max_allowed_packet (16 MiB by default on
// MariaDB, 64 MiB on MySQL 8) however large the batch.
const (
	mysqlMaxChunkRows  = 1024
	mysqlMaxChunkBytes = 4 << 20
)

// DATETIME(6) holds years 1000 to 9999; PostgreSQL's timestamptz holds
// more. A DeliverAt outside is clamped: earlier means "due now" on both,
// later means "not in this millennium".
var (
	mysqlMinTime = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	mysqlMaxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// mysqlIdent quotes table for MySQL: `schema`.`name`, or `name` alone when
// Schema is empty (the connection's database). It names the same table as
// migrations.MySQLIdent.
func mysqlIdent(t Table) string {
	name := t.Name
	if name == "" {
		name = DefaultTable
	}
	q := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	if t.Schema == "" {
		return q(name)
	}
	return q(t.Schema) + "." + q(name)
}

// mysqlMessage is one validated message ready for MySQL.
type mysqlMessage struct {
	args     []any // the 7 values of one VALUES row
	id       uuid.UUID
	dedup    string
	callerID bool // the message carried its own ID
	size     int  // bytes of payload, key and headers
}

// writeMySQL inserts validated messages in order. Runs of messages with
// generated ids go in multi-row INSERTs; a message with its own ID goes in
// one INSERT of its own, so that whether it was a duplicate can be read
// from the affected-row count (a UUIDv7 the Writer generated collides with
// nothing, so only dedup keys make those duplicates, and their holders are
// read back).
func (w *Writer) writeMySQL(ctx context.Context, tx MySQLExecutor, msgs []mysqlMessage, results []Result) error {
	for start := 0; start < len(msgs); {
		if msgs[start].callerID {
			if err := w.insertOwnIDMySQL(ctx, tx, &msgs[start], &results[start]); err != nil {
				return err
			}
			start++
			continue
		}
		end, size := start, 0
		for end < len(msgs) && !msgs[end].callerID && end-start < mysqlMaxChunkRows &&
			(end == start || size+msgs[end].size <= mysqlMaxChunkBytes) {
			size += msgs[end].size
			end++
		}
		if err := w.insertChunkMySQL(ctx, tx, msgs[start:end], results[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// insertSQLMySQL returns the INSERT of n rows. A duplicate id or dedup_key
// turns into an update that changes nothing (no row, no error, the
// transaction unharmed), unlike INSERT IGNORE, which would also turn
// other errors (a value too long, say) into warnings and drop the row.
func (w *Writer) insertSQLMySQL(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + w.mysqlTable +
		" (id, topic, `key`, payload, headers, dedup_key, next_retry_at)\nVALUES ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",\n")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6)))")
	}
	b.WriteString("\nON DUPLICATE KEY UPDATE id = id")
	return b.String()
}

// insertChunkMySQL inserts messages with generated ids and marks those
// whose dedup key another row already holds, with that row's id.
func (w *Writer) insertChunkMySQL(ctx context.Context, tx MySQLExecutor, msgs []mysqlMessage, results []Result) error {
	// Rows go in dedup-key order, so that writers whose batches share keys
	// lock them in the same order.
	order := make([]int, len(msgs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return msgs[order[a]].dedup < msgs[order[b]].dedup })
	args := make([]any, 0, len(msgs)*7)
	var ids []any // of the messages with a dedup key, which may be duplicates
	for _, i := range order {
		m := msgs[i]
		args = append(args, m.args...)
		if m.dedup != "" {
			ids = append(ids, m.args[0])
		}
	}
	if _, err := tx.ExecContext(ctx, w.insertSQLMySQL(len(msgs)), args...); err != nil {
		return fmt.Errorf("outbox: insert into %s: %w", w.mysqlTable, err)
	}
	if len(ids) == 0 {
		return nil
	}
	written, err := w.writtenMySQL(ctx, tx, ids)
	if err != nil {
		return err
	}
	for i, m := range msgs {
		if m.dedup == "" || written[m.id] {
			continue
		}
		holder, err := w.existingIDMySQL(ctx, tx, m.dedup, uuid.Nil)
		if err != nil {
			return err
		}
		if holder == uuid.Nil {
			return fmt.Errorf("outbox: insert into %s: no row holds dedup key %q after the insert", w.mysqlTable, m.dedup)
		}
		results[i] = Result{ID: holder, Duplicate: true}
	}
	return nil
}

// writtenMySQL returns which of ids (generated, so new to the table) the
// INSERT wrote: the transaction sees its own rows, so a plain read by
// primary key finds exactly those and locks nothing. (A locking read of
// the dedup keys instead took next-key locks on the unique index, and
// concurrent writers with overlapping keys deadlocked on them.)
func (w *Writer) writtenMySQL(ctx context.Context, tx MySQLExecutor, ids []any) (map[uuid.UUID]bool, error) {
	query := "SELECT id\nFROM " + w.mysqlTable + "\nWHERE id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")"
	rows, err := tx.QueryContext(ctx, query, ids...)
	if err != nil {
		return nil, fmt.Errorf("outbox: read back written ids: %w", err)
	}
	defer rows.Close()
	written := make(map[uuid.UUID]bool, len(ids))
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("outbox: read back written ids: %w", err)
		}
		u, err := uuid.FromBytes(id)
		if err != nil {
			return nil, fmt.Errorf("outbox: read back written ids: %w", err)
		}
		written[u] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: read back written ids: %w", err)
	}
	return written, nil
}

// insertOwnIDMySQL inserts one message that carries its own ID. No row
// affected means a row with that id or dedup key was there.
func (w *Writer) insertOwnIDMySQL(ctx context.Context, tx MySQLExecutor, m *mysqlMessage, res *Result) error {
	r, err := tx.ExecContext(ctx, w.insertSQLMySQL(1), m.args...)
	if err != nil {
		return fmt.Errorf("outbox: insert into %s: %w", w.mysqlTable, err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return fmt.Errorf("outbox: insert into %s: rows affected: %w", w.mysqlTable, err)
	}
	if n != 0 {
		return nil
	}
	res.Duplicate = true
	if m.dedup != "" {
		if res.ID, err = w.existingIDMySQL(ctx, tx, m.dedup, m.id); err != nil {
			return err
		}
	}
	return nil
}

// existingIDMySQL returns the id of the row holding dedupKey, or own when
// none does (the conflict was on the id). The read locks (FOR UPDATE): in
// REPEATABLE READ a plain read sees the transaction's snapshot, which may
// predate the row the INSERT ran into. The INSERT already locked that
// row, and an equality match on a unique index locks the row alone, so
// the read waits for nobody.
func (w *Writer) existingIDMySQL(ctx context.Context, tx MySQLExecutor, dedupKey string, own uuid.UUID) (uuid.UUID, error) {
	var id []byte
	err := tx.QueryRowContext(ctx, "SELECT id\nFROM "+w.mysqlTable+"\nWHERE dedup_key = ?\nFOR UPDATE", dedupKey).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return own, nil
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: look up duplicate of dedup key: %w", err)
	}
	u, err := uuid.FromBytes(id)
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: look up duplicate of dedup key: id: %w", err)
	}
	return u, nil
}

// newMySQLMessage turns newRow's values into MySQL's: the id as 16 bytes
// and DeliverAt as UTC text, which DATETIME(6) stores whatever the
// driver's loc or the session's time_zone.
func newMySQLMessage(row []any, callerID bool) mysqlMessage {
	id := uuid.UUID(row[0].(pgtype.UUID).Bytes)
	args := make([]any, len(row))
	copy(args, row)
	args[0] = id[:]
	m := mysqlMessage{args: args, id: id, callerID: callerID}
	if d, ok := row[5].(string); ok {
		m.dedup = d
	}
	if at, ok := row[6].(time.Time); ok {
		at = at.UTC()
		if at.Before(mysqlMinTime) {
			at = mysqlMinTime
		} else if at.After(mysqlMaxTime) {
			at = mysqlMaxTime
		}
		args[6] = at.Format("2006-01-02 15:04:05.999999")
	}
	key, _ := row[2].([]byte)
	m.size = len(key) + len(row[3].([]byte)) + len(row[4].(string))
	return m
}

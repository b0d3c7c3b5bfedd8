package bench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// isMySQL reports whether url names a MySQL or MariaDB server: a
// mysql:// or mariadb:// URL. Every other URL is PostgreSQL's.
func isMySQL(url string) bool { return mysqldsn.IsURL(url) }

// mysqlConfig reads a mysql:// URL as the relay does (mysqldsn.ParseURL:
// times as UTC, interpolated parameters), so that the harness's and the
// ceiling's sessions are the relays'.
func mysqlConfig(url string) (*mysql.Config, error) { return mysqldsn.ParseURL(url) }

// openMySQL opens a pool on the server of url and checks that it is one
// the relay supports (migrations.CheckMySQLServer).
func openMySQL(ctx context.Context, url string, conns int) (*sql.DB, migrations.ServerVersion, error) {
	cfg, err := mysqlConfig(url)
	if err != nil {
		return nil, migrations.ServerVersion{}, fmt.Errorf("database URL: %w", err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, migrations.ServerVersion{}, fmt.Errorf("database URL: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, migrations.ServerVersion{}, fmt.Errorf("cannot reach MySQL/MariaDB at %s (start it, or pass another database URL): %w", cfg.Addr, err)
	}
	v, err := migrations.CheckMySQLServer(ctx, db)
	if err != nil {
		db.Close()
		return nil, v, err
	}
	return db, v, nil
}

// mysqlMarkerTable is the table Run creates in every MySQL database it
// makes, with schemaMarker as its comment: only a database holding it is
// dropped. (MySQL 8 databases take no comment.)
const mysqlMarkerTable = "relay_bench"

// The statements about MySQL databases and tables. {{db}} is the quoted
// database, {{table}} the quoted outbox table.
const (
	mysqlDatabaseExistsSQL = `SELECT COUNT(*)
FROM information_schema.SCHEMATA
WHERE SCHEMA_NAME = ?`

	mysqlMarkerSQL = `SELECT COUNT(*)
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = ?
  AND TABLE_NAME = '` + mysqlMarkerTable + `'
  AND TABLE_COMMENT = '` + schemaMarker + `'`

	mysqlDropSQL   = "DROP DATABASE IF EXISTS {{db}}"
	mysqlCreateSQL = "CREATE DATABASE {{db}} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	mysqlMarkSQL   = "CREATE TABLE {{db}}.`" + mysqlMarkerTable + "` (marker INT) COMMENT = '" + schemaMarker + "'"

	// mysqlUnfinishedSQL tells whether a row is still pending or
	// processing; each branch stops at the first entry of due_idx, which
	// leads with status.
	mysqlUnfinishedSQL = `SELECT EXISTS (
    SELECT 1 FROM {{table}} FORCE INDEX (due_idx)
    WHERE status = 'pending'
    LIMIT 1
) OR EXISTS (
    SELECT 1 FROM {{table}} FORCE INDEX (due_idx)
    WHERE status = 'processing'
    LIMIT 1
)`

	mysqlStatusCountsSQL = `SELECT status, COUNT(*)
FROM {{table}}
GROUP BY status`

	// mysqlLastSentSQL reads the end of sent_idx.
	mysqlLastSentSQL = `SELECT MAX(sent_at)
FROM {{table}}
WHERE status = 'sent'`

	// mysqlSizeSQL reads the table's size (data and indexes) as InnoDB's
	// statistics have it: fresh after ANALYZE TABLE.
	mysqlSizeSQL = `SELECT COALESCE(DATA_LENGTH + INDEX_LENGTH, 0)
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = ?
  AND TABLE_NAME = ?`
)

// mysqlSQL fills {{db}} and {{table}} with table's quoted database and
// name.
func mysqlSQL(query string, table outbox.Table) string {
	return strings.NewReplacer(
		"{{db}}", migrations.MySQLIdent(outbox.Table{Name: table.Schema}),
		"{{table}}", migrations.MySQLIdent(table),
	).Replace(query)
}

// resetMySQLDatabase drops the database name if Run created it, and
// creates it afresh, marked as Run's.
func resetMySQLDatabase(ctx context.Context, db *sql.DB, name string) error {
	t := outbox.Table{Schema: name}
	var exists, marked int
	if err := db.QueryRowContext(ctx, mysqlDatabaseExistsSQL, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists > 0 {
		if err := db.QueryRowContext(ctx, mysqlMarkerSQL, name).Scan(&marked); err != nil {
			return fmt.Errorf("look up database %s: %w", name, err)
		}
		if marked == 0 {
			return fmt.Errorf("%w: database %s (drop it yourself or choose another --schema)", ErrForeignSchema, name)
		}
	}
	for _, q := range []string{mysqlDropSQL, mysqlCreateSQL, mysqlMarkSQL} {
		if _, err := db.ExecContext(ctx, mysqlSQL(q, t)); err != nil {
			return fmt.Errorf("recreate database %s: %w", name, err)
		}
	}
	return nil
}

// dropMySQLDatabase drops a database Run created.
func dropMySQLDatabase(ctx context.Context, db *sql.DB, name string) error {
	if _, err := db.ExecContext(ctx, mysqlSQL(mysqlDropSQL, outbox.Table{Schema: name})); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// prepareMySQLOutbox recreates the database name and migrates the outbox
// table in it with migrations.UpMySQL.
func prepareMySQLOutbox(ctx context.Context, db *sql.DB, name string) (outbox.Table, error) {
	table := outbox.Table{Schema: name, Name: outbox.DefaultTable}
	if err := resetMySQLDatabase(ctx, db, name); err != nil {
		return table, err
	}
	if _, err := migrations.UpMySQL(ctx, db, table); err != nil {
		return table, fmt.Errorf("migrate %s: %w", migrations.MySQLIdent(table), err)
	}
	return table, nil
}

// prewriteMySQL writes n events with the Writer through outbox.FromMySQL,
// prewriteBatch per transaction (one multi-row INSERT each), and returns
// their ids.
func prewriteMySQL(ctx context.Context, db *sql.DB, table outbox.Table, topic string, n, payloadBytes int) ([]uuid.UUID, error) {
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		return nil, err
	}
	payload := bytes.Repeat([]byte("x"), payloadBytes)
	ids := make([]uuid.UUID, 0, n)
	msgs := make([]outbox.Message, 0, prewriteBatch)
	for done := 0; done < n; done += len(msgs) {
		msgs = msgs[:0]
		for i := done; i < min(n, done+prewriteBatch); i++ {
			msgs = append(msgs, outbox.Message{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i), Payload: payload})
		}
		results, err := writeMySQLBatch(ctx, db, w, msgs)
		if err != nil {
			return nil, fmt.Errorf("pre-write: %w", err)
		}
		for _, res := range results {
			ids = append(ids, res.ID)
		}
	}
	return ids, nil
}

// writeMySQLBatch writes msgs in one transaction.
func writeMySQLBatch(ctx context.Context, db *sql.DB, w *outbox.Writer, msgs []outbox.Message) ([]outbox.Result, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	results, err := w.WriteBatch(ctx, outbox.FromMySQL(tx), msgs)
	if err != nil {
		return nil, err
	}
	return results, tx.Commit()
}

// analyzeMySQL runs ANALYZE TABLE, which refreshes InnoDB's statistics
// (and the sizes information_schema shows).
func analyzeMySQL(ctx context.Context, db *sql.DB, table outbox.Table) error {
	rows, err := db.QueryContext(ctx, "ANALYZE TABLE "+migrations.MySQLIdent(table))
	if err != nil {
		return fmt.Errorf("analyze %s: %w", migrations.MySQLIdent(table), err)
	}
	defer rows.Close()
	for rows.Next() { // one row per table, with its outcome
	}
	return rows.Err()
}

// mysqlTableSize returns the table's size after ANALYZE TABLE.
func mysqlTableSize(ctx context.Context, db *sql.DB, table outbox.Table) (int64, error) {
	if err := analyzeMySQL(ctx, db, table); err != nil {
		return 0, err
	}
	var size int64
	if err := db.QueryRowContext(ctx, mysqlSizeSQL, table.Schema, table.Name).Scan(&size); err != nil {
		return 0, fmt.Errorf("size of %s: %w", migrations.MySQLIdent(table), err)
	}
	return size, nil
}

// mysqlUnfinished reports whether any row is still pending or processing.
func mysqlUnfinished(ctx context.Context, db *sql.DB, table outbox.Table) (bool, error) {
	var yes bool
	if err := db.QueryRowContext(ctx, mysqlSQL(mysqlUnfinishedSQL, table)).Scan(&yes); err != nil {
		return false, fmt.Errorf("poll %s: %w", migrations.MySQLIdent(table), err)
	}
	return yes, nil
}

// mysqlStatusCounts counts the rows per status.
func mysqlStatusCounts(ctx context.Context, db *sql.DB, table outbox.Table) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, mysqlSQL(mysqlStatusCountsSQL, table))
	if err != nil {
		return nil, fmt.Errorf("count %s: %w", migrations.MySQLIdent(table), err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return nil, fmt.Errorf("count %s: %w", migrations.MySQLIdent(table), err)
		}
		out[status] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count %s: %w", migrations.MySQLIdent(table), err)
	}
	return out, nil
}

// mysqlClock returns the database's UTC_TIMESTAMP(6), the clock of the
// relay's sent_at.
func mysqlClock(ctx context.Context, db *sql.DB) (time.Time, error) {
	var t migrations.MySQLTime
	if err := db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return t.Time, nil
}

// mysqlLastSent returns the latest sent_at of the table.
func mysqlLastSent(ctx context.Context, db *sql.DB, table outbox.Table) (time.Time, error) {
	var t migrations.MySQLTime
	if err := db.QueryRowContext(ctx, mysqlSQL(mysqlLastSentSQL, table)).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("last sent_at of %s: %w", migrations.MySQLIdent(table), err)
	}
	if t.IsZero() {
		return time.Time{}, fmt.Errorf("no row of %s was sent", migrations.MySQLIdent(table))
	}
	return t.Time, nil
}

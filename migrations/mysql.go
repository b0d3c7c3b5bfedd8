package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/outboxrelay/outboxrelay/outbox"
)

// The MySQL and MariaDB migrations live in mysql/, numbered on their own
// from 001: 001 creates the outbox table as PostgreSQL's 001-007 left it
// (failed_at included, with the indexes a table without partial indexes
// needs), 002 the jobs table of retention (PostgreSQL's 004), 003 the
// audit trail (PostgreSQL's 007), 005 ordered delivery by per-key
// counters (docs/ordering.md#mysql-and-mariadb). PostgreSQL's other
// migrations have no meaning here (002 and 005 ordered delivery by
// transaction id, 003 LISTEN/NOTIFY, 006 an id default in PL/pgSQL), and
// replaying that history on a new dialect would only add steps; a later
// MySQL migration takes the next MySQL number whatever PostgreSQL's is
// then.
//
// MySQL commits every DDL statement at once, so a migration cannot run in
// a transaction as on PostgreSQL: each statement of a migration is
// written to run again unharmed (IF NOT EXISTS, INSERT IGNORE), and a
// migrator that died between a statement and the version row it records
// afterwards is repaired by running up again. Concurrent migrators are
// serialised by GET_LOCK on one connection.

//go:embed mysql/*.sql mysql_inbox/*.sql
var mysqlFiles embed.FS

var (
	mysqlOutbox = set{fsys: subdir(mysqlFiles, "mysql"), what: "MySQL"}
	mysqlInbox  = set{fsys: subdir(mysqlFiles, "mysql_inbox"), what: "MySQL inbox"}
)

// Minimum server versions. MariaDB 10.6 brought SKIP LOCKED (expression
// defaults came in 10.2); on MySQL, SKIP LOCKED came in 8.0.1 and
// expression defaults such as DEFAULT (UTC_TIMESTAMP(6)), which the
// table's time columns and JSON headers need, in 8.0.13, which is
// therefore the floor (8.0.11 was the first GA release of 8.0).
var (
	// MinMySQL is the oldest MySQL the relay runs on.
	MinMySQL = ServerVersion{Flavor: "MySQL", Major: 8, Minor: 0, Patch: 13}
	// MinMariaDB is the oldest MariaDB the relay runs on.
	MinMariaDB = ServerVersion{Flavor: "MariaDB", Major: 10, Minor: 6, Patch: 0}
)

// Errors of the MySQL server check, for errors.Is; the error is an
// *UnsupportedServerError.
var (
	// ErrServerTooOld means the server lacks FOR UPDATE SKIP LOCKED or
	// another feature the statements need: MySQL before 8.0.13, MariaDB
	// before 10.6, or anything else.
	ErrServerTooOld = errors.New("database server too old: the relay needs MySQL 8.0.13+ or MariaDB 10.6+")
	// ErrStatementBinlog means the server writes a statement-based binary
	// log: MariaDB marks SKIP LOCKED unsafe for it, and InnoDB refuses
	// READ COMMITTED writes under it. binlog_format ROW or MIXED, or no
	// binary log, is needed.
	ErrStatementBinlog = errors.New("binlog_format=STATEMENT is not supported: set binlog_format to ROW or MIXED")
	// ErrNoDatabase means table names no database and the connection has
	// none selected.
	ErrNoDatabase = errors.New("no database selected: name one in the DSN or in Table.Schema")
)

// ServerVersion is a MySQL or MariaDB server's version, as parsed from
// SELECT VERSION().
type ServerVersion struct {
	// Flavor is "MySQL" or "MariaDB".
	Flavor              string
	Major, Minor, Patch int
	// Raw is the text VERSION() returned.
	Raw string
}

// String returns the flavor and the version, e.g. "MariaDB 10.11.19".
func (v ServerVersion) String() string {
	return fmt.Sprintf("%s %d.%d.%d", v.Flavor, v.Major, v.Minor, v.Patch)
}

// less reports whether v is older than w (same flavor assumed).
func (v ServerVersion) less(w ServerVersion) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// ParseServerVersion reads the text of SELECT VERSION(), such as
// "8.0.36", "8.0.36-0ubuntu0.22.04.1" or "10.11.19-MariaDB-0+deb12u1".
// A MariaDB that reports the replication prefix "5.5.5-" is read past it.
func ParseServerVersion(s string) (ServerVersion, error) {
	v := ServerVersion{Flavor: "MySQL", Raw: s}
	rest := s
	if strings.Contains(strings.ToLower(s), "mariadb") {
		v.Flavor = "MariaDB"
		rest = strings.TrimPrefix(rest, "5.5.5-")
	}
	if i := strings.IndexAny(rest, "-+ "); i >= 0 {
		rest = rest[:i]
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return ServerVersion{}, fmt.Errorf("migrations: unrecognised server version %q", s)
	}
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return ServerVersion{}, fmt.Errorf("migrations: unrecognised server version %q", s)
		}
		*nums[i] = n
	}
	return v, nil
}

// UnsupportedServerError is the server check's refusal. It wraps
// ErrServerTooOld or ErrStatementBinlog.
type UnsupportedServerError struct {
	// Version is the server's version.
	Version ServerVersion
	// BinlogFormat is the session's binlog_format when the binary log is
	// on and statement-based; empty otherwise.
	BinlogFormat string
}

func (e *UnsupportedServerError) Error() string {
	if e.BinlogFormat != "" {
		return fmt.Sprintf("%s logs binlog_format=%s: FOR UPDATE SKIP LOCKED is unsafe for statement-based replication; set binlog_format=ROW (or MIXED)", e.Version, e.BinlogFormat)
	}
	return fmt.Sprintf("%s (%q) is not supported: the relay needs FOR UPDATE SKIP LOCKED and expression defaults, in %s+ or %s+",
		e.Version, e.Version.Raw, shortVersion(MinMySQL), shortVersion(MinMariaDB))
}

// Unwrap returns the sentinel the refusal is about.
func (e *UnsupportedServerError) Unwrap() error {
	if e.BinlogFormat != "" {
		return ErrStatementBinlog
	}
	return ErrServerTooOld
}

func shortVersion(v ServerVersion) string {
	return fmt.Sprintf("%s %d.%d.%d", v.Flavor, v.Major, v.Minor, v.Patch)
}

// checkServer refuses a server too old for the statements, or one that
// writes a statement-based binary log.
func checkServer(v ServerVersion, logBin bool, binlogFormat string) error {
	minimum := MinMySQL
	if v.Flavor == "MariaDB" {
		minimum = MinMariaDB
	}
	if v.less(minimum) {
		return &UnsupportedServerError{Version: v}
	}
	if logBin && strings.EqualFold(binlogFormat, "STATEMENT") {
		return &UnsupportedServerError{Version: v, BinlogFormat: strings.ToUpper(binlogFormat)}
	}
	return nil
}

// MySQLQuerier is what the read-only MySQL functions need: *sql.DB,
// *sql.Conn and *sql.Tx satisfy it.
type MySQLQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// CheckMySQLServer reads the server's version and binary log settings and
// refuses (an *UnsupportedServerError) a server too old for the relay's
// statements or one whose session logs statement-based binlog. The binlog
// format is read for the session that answers: a pool's sessions share
// it unless the DSN sets it.
func CheckMySQLServer(ctx context.Context, q MySQLQuerier) (ServerVersion, error) {
	var raw string
	var logBin sql.NullInt64
	if err := q.QueryRowContext(ctx, "SELECT VERSION(), @@log_bin").Scan(&raw, &logBin); err != nil {
		return ServerVersion{}, fmt.Errorf("migrations: read the server version: %w", err)
	}
	v, err := ParseServerVersion(raw)
	if err != nil {
		return ServerVersion{}, err
	}
	// SHOW VARIABLES reads the session's value, and returns no row rather
	// than an error on a server that no longer has the variable (MySQL
	// deprecated binlog_format in 8.0.34 and means to drop it, leaving
	// row-based logging the only kind).
	var name, format string
	err = q.QueryRowContext(ctx, "SHOW VARIABLES LIKE 'binlog_format'").Scan(&name, &format)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return ServerVersion{}, fmt.Errorf("migrations: read binlog_format: %w", err)
	}
	return v, checkServer(v, logBin.Int64 == 1, format)
}

// MySQLIdent returns table's quoted name for MySQL: `schema`.`name`, or
// `name` alone when table.Schema is empty, which names the connection's
// database. (outbox.Table.WithDefaults sets the PostgreSQL schema
// "public": on MySQL that would be a database called public.) An empty
// Name means "outbox".
func MySQLIdent(table outbox.Table) string {
	return mysqlName(table, "")
}

// MySQLRelated returns the quoted name of the helper table suffix of
// table (MySQLRelated(t, "jobs") is `outbox_jobs`), in the same database
// as MySQLIdent's.
func MySQLRelated(table outbox.Table, suffix string) string {
	return mysqlName(table, "_"+suffix)
}

func mysqlName(table outbox.Table, suffix string) string {
	name := table.Name
	if name == "" {
		name = outbox.DefaultTable
	}
	if table.Schema == "" {
		return quoteMySQL(name + suffix)
	}
	return quoteMySQL(table.Schema) + "." + quoteMySQL(name+suffix)
}

// quoteMySQL quotes an identifier with backticks. Names are validated
// before they get here; a backtick would be doubled all the same.
func quoteMySQL(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}

// AllMySQL returns the embedded MySQL/MariaDB migrations in version order.
func AllMySQL() ([]Migration, error) { return mysqlOutbox.all() }

// LatestMySQL is the highest embedded MySQL/MariaDB version.
func LatestMySQL() int { return mysqlOutbox.latest() }

// UpMySQL applies every pending MySQL/MariaDB migration to table and
// returns what it applied (nothing when the schema is current). It first
// checks the server (CheckMySQLServer), and refuses a table that holds a
// newer version than it knows (ErrSchemaTooNew). Concurrent calls for the
// same table wait for each other (GET_LOCK); the later ones find nothing
// to do. Each migration is recorded once its statements ran: they are not
// atomic (MySQL commits DDL at once), and a migration cut short runs again
// whole at the next UpMySQL, harmlessly.
func UpMySQL(ctx context.Context, db *sql.DB, table outbox.Table) ([]Migration, error) {
	return upMySQL(ctx, db, mysqlOutbox, table)
}

func upMySQL(ctx context.Context, db *sql.DB, s set, table outbox.Table) ([]Migration, error) {
	all, err := s.all()
	if err != nil {
		return nil, err
	}
	var applied []Migration
	err = lockedMySQL(ctx, db, s, table, func(conn *sql.Conn, done map[int]time.Time) error {
		for _, m := range all {
			if _, ok := done[m.Version]; ok {
				continue
			}
			if err := execMySQL(ctx, conn, table, m, m.up); err != nil {
				return err
			}
			if _, err := conn.ExecContext(ctx, "INSERT INTO "+MySQLRelated(table, "migrations")+" (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
				return fmt.Errorf("migrations: record %03d: %w", m.Version, err)
			}
			applied = append(applied, m)
		}
		return nil
	})
	return applied, err
}

// DownMySQL reverts the most recently applied MySQL/MariaDB migration of
// table and returns it; ok is false when nothing was applied. Like UpMySQL
// it refuses a table that holds a newer version than it knows.
func DownMySQL(ctx context.Context, db *sql.DB, table outbox.Table) (reverted Migration, ok bool, err error) {
	return downMySQL(ctx, db, mysqlOutbox, table)
}

func downMySQL(ctx context.Context, db *sql.DB, s set, table outbox.Table) (reverted Migration, ok bool, err error) {
	all, err := s.all()
	if err != nil {
		return Migration{}, false, err
	}
	err = lockedMySQL(ctx, db, s, table, func(conn *sql.Conn, done map[int]time.Time) error {
		for i := len(all) - 1; i >= 0; i-- {
			m := all[i]
			if _, applied := done[m.Version]; !applied {
				continue
			}
			if err := execMySQL(ctx, conn, table, m, m.down); err != nil {
				return err
			}
			if _, err := conn.ExecContext(ctx, "DELETE FROM "+MySQLRelated(table, "migrations")+" WHERE version = ?", m.Version); err != nil {
				return fmt.Errorf("migrations: unrecord %03d: %w", m.Version, err)
			}
			reverted, ok = m, true
			return nil
		}
		return nil
	})
	return reverted, ok, err
}

// StatusMySQL lists every embedded MySQL/MariaDB migration with its
// applied time (UTC), plus any applied version this binary does not know
// (Name "unknown"). It only reads.
func StatusMySQL(ctx context.Context, q MySQLQuerier, table outbox.Table) ([]State, error) {
	return statusMySQL(ctx, q, mysqlOutbox, table)
}

func statusMySQL(ctx context.Context, q MySQLQuerier, s set, table outbox.Table) ([]State, error) {
	if err := table.Validate(); err != nil {
		return nil, err
	}
	all, err := s.all()
	if err != nil {
		return nil, err
	}
	schema, err := mysqlSchema(ctx, q, table)
	if err != nil {
		return nil, err
	}
	exists, err := mysqlTableExists(ctx, q, schema, mysqlBase(table)+"_migrations")
	if err != nil {
		return nil, err
	}
	done := map[int]time.Time{}
	if exists {
		if done, err = appliedMySQL(ctx, q, table); err != nil {
			return nil, err
		}
	}
	var states []State
	known := map[int]bool{}
	for _, m := range all {
		known[m.Version] = true
		states = append(states, State{Migration: m, AppliedAt: done[m.Version]})
	}
	for v, at := range done {
		if !known[v] {
			states = append(states, State{Migration: Migration{Version: v, Name: "unknown"}, AppliedAt: at})
		}
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Version < states[j].Version })
	return states, nil
}

// CheckMySQL verifies, without changing anything, that the server is one
// the relay supports (CheckMySQLServer) and that table exists and carries
// exactly the MySQL/MariaDB migrations this binary knows. A schema error
// wraps ErrNotMigrated or ErrSchemaTooNew and names the table.
func CheckMySQL(ctx context.Context, q MySQLQuerier, table outbox.Table) error {
	return checkMySQL(ctx, q, mysqlOutbox, table)
}

func checkMySQL(ctx context.Context, q MySQLQuerier, s set, table outbox.Table) error {
	if err := table.Validate(); err != nil {
		return err
	}
	if _, err := CheckMySQLServer(ctx, q); err != nil {
		return err
	}
	schema, err := mysqlSchema(ctx, q, table)
	if err != nil {
		return err
	}
	for _, name := range []string{mysqlBase(table), mysqlBase(table) + "_migrations"} {
		ok, err := mysqlTableExists(ctx, q, schema, name)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s: %w", s.named(schema+"."+mysqlBase(table)), ErrNotMigrated)
		}
	}
	var highest int
	if err := q.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM "+MySQLRelated(table, "migrations")).Scan(&highest); err != nil {
		return fmt.Errorf("migrations: read versions of %s.%s: %w", schema, mysqlBase(table), err)
	}
	switch latest := s.latest(); {
	case highest < latest:
		return fmt.Errorf("%s is at version %d, this binary needs %d: %w", s.named(schema+"."+mysqlBase(table)), highest, latest, ErrNotMigrated)
	case highest > latest:
		return fmt.Errorf("%s is at version %d, this binary knows up to %d: %w", s.named(schema+"."+mysqlBase(table)), highest, latest, ErrSchemaTooNew)
	}
	return nil
}

// mysqlBase is the table's unquoted name.
func mysqlBase(table outbox.Table) string {
	if table.Name == "" {
		return outbox.DefaultTable
	}
	return table.Name
}

// mysqlSchema returns the database that holds table: its Schema, or the
// connection's database.
func mysqlSchema(ctx context.Context, q MySQLQuerier, table outbox.Table) (string, error) {
	if table.Schema != "" {
		return table.Schema, nil
	}
	var db sql.NullString
	if err := q.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&db); err != nil {
		return "", fmt.Errorf("migrations: read the current database: %w", err)
	}
	if !db.Valid || db.String == "" {
		return "", ErrNoDatabase
	}
	return db.String, nil
}

func mysqlTableExists(ctx context.Context, q MySQLQuerier, schema, name string) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", schema, name).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("migrations: look up %s.%s: %w", schema, name, err)
	}
	return n > 0, nil
}

// appliedMySQL reads the migrations table.
func appliedMySQL(ctx context.Context, q MySQLQuerier, table outbox.Table) (map[int]time.Time, error) {
	rows, err := q.QueryContext(ctx, "SELECT version, applied_at FROM "+MySQLRelated(table, "migrations"))
	if err != nil {
		return nil, fmt.Errorf("migrations: read versions: %w", err)
	}
	defer rows.Close()
	done := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at MySQLTime
		if err := rows.Scan(&v, &at); err != nil {
			return nil, fmt.Errorf("migrations: read versions: %w", err)
		}
		done[v] = at.Time
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: read versions: %w", err)
	}
	return done, nil
}

// mysqlLockWait is how long one GET_LOCK call waits before the migrator
// looks at its context and asks again.
const mysqlLockWait = 1

// lockedMySQL checks the server and runs fn on one connection holding the
// table's migration lock (GET_LOCK, released at the end), with the
// migrations table created if missing, and passes the applied versions.
func lockedMySQL(ctx context.Context, db *sql.DB, s set, table outbox.Table, fn func(*sql.Conn, map[int]time.Time) error) error {
	if err := table.Validate(); err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrations: connect: %w", err)
	}
	defer conn.Close()
	if _, err := CheckMySQLServer(ctx, conn); err != nil {
		return err
	}
	schema, err := mysqlSchema(ctx, conn, table)
	if err != nil {
		return err
	}
	// GET_LOCK names are at most 64 characters: the table's is hashed.
	sum := sha256.Sum256([]byte(schema + "." + mysqlBase(table)))
	lock := "outboxrelay.migrate." + hex.EncodeToString(sum[:])[:40]
	for {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", lock, mysqlLockWait).Scan(&got); err != nil {
			return fmt.Errorf("migrations: take lock: %w", err)
		}
		if got.Valid && got.Int64 == 1 {
			break
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("migrations: take lock: %w", err)
		}
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(?)", lock) //nolint:errcheck // closing the session releases it too

	exists, err := mysqlTableExists(ctx, conn, schema, mysqlBase(table)+"_migrations")
	if err != nil {
		return err
	}
	if !exists {
		_, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+MySQLRelated(table, "migrations")+` (
    version    INT         NOT NULL,
    name       VARCHAR(64) NOT NULL,
    applied_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`)
		if err != nil {
			return fmt.Errorf("migrations: prepare %s.%s: %w", schema, mysqlBase(table), err)
		}
	}
	done, err := appliedMySQL(ctx, conn, table)
	if err != nil {
		return err
	}
	highest := 0
	for v := range done {
		highest = max(highest, v)
	}
	if latest := s.latest(); highest > latest {
		return fmt.Errorf("%s is at version %d, this binary knows up to %d: %w", s.named(schema+"."+mysqlBase(table)), highest, latest, ErrSchemaTooNew)
	}
	return fn(conn, done)
}

// mysqlShape is what a MySQL migration's template may ask about the table.
type mysqlShape struct {
	// Table is the quoted table name.
	Table string
	// SchemaSQL and NameSQL are its database and name as SQL text values,
	// for information_schema: a literal, or DATABASE() for the
	// connection's database. Names are validated identifiers.
	SchemaSQL, NameSQL string
}

// execMySQL renders a MySQL migration for table and runs its statements
// one by one (the driver sends one statement per call).
func execMySQL(ctx context.Context, conn *sql.Conn, table outbox.Table, m Migration, body string) error {
	t, err := template.New(m.Name).Funcs(template.FuncMap{
		"name":    func(suffix string) string { return quoteMySQL(mysqlBase(table) + "_" + suffix) },
		"related": func(suffix string) string { return MySQLRelated(table, suffix) },
	}).Parse(body)
	if err != nil {
		return fmt.Errorf("migrations: parse mysql/%03d_%s: %w", m.Version, m.Name, err)
	}
	var text strings.Builder
	shape := mysqlShape{Table: MySQLIdent(table), SchemaSQL: "DATABASE()", NameSQL: "'" + mysqlBase(table) + "'"}
	if table.Schema != "" {
		shape.SchemaSQL = "'" + table.Schema + "'"
	}
	if err := t.Execute(&text, shape); err != nil {
		return fmt.Errorf("migrations: render mysql/%03d_%s: %w", m.Version, m.Name, err)
	}
	for _, stmt := range splitMySQL(text.String()) {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrations: apply mysql/%03d_%s to %s: %w", m.Version, m.Name, mysqlBase(table), err)
		}
	}
	return nil
}

// splitMySQL drops comment lines and splits a script into statements at
// the semicolons that end a line.
func splitMySQL(script string) []string {
	var stmts []string
	var cur strings.Builder
	for line := range strings.Lines(script) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		stmts = append(stmts, s)
	}
	return stmts
}

// MySQLTime scans a DATETIME whether the driver returns time.Time
// (parseTime=true) or text (the default), as UTC; NULL scans as the zero
// time.
type MySQLTime struct{ time.Time }

// mysqlLayout is how MySQL writes a DATETIME(6) as text.
const mysqlLayout = "2006-01-02 15:04:05.999999"

// Scan implements sql.Scanner.
func (t *MySQLTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		t.Time = time.Time{}
	case time.Time:
		t.Time = v
	case []byte:
		return t.parse(string(v))
	case string:
		return t.parse(v)
	default:
		return fmt.Errorf("migrations: cannot scan %T as a DATETIME", src)
	}
	return nil
}

func (t *MySQLTime) parse(s string) error {
	p, err := time.ParseInLocation(mysqlLayout, s, time.UTC)
	if err != nil {
		return fmt.Errorf("migrations: DATETIME %q: %w", s, err)
	}
	t.Time = p
	return nil
}

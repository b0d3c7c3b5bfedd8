package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/outbox"
)

//go:embed *.sql
var files embed.FS

//go:embed inbox/*.sql
var inboxFiles embed.FS

// set is one family of migrations, recorded in its own versions table
// (the table's name and "_migrations"): the outbox table's or the inbox
// table's (package inbox), on PostgreSQL or on MySQL.
type set struct {
	fsys fs.FS
	what string // names the set in errors: "" for the outbox on PostgreSQL
}

var (
	pgOutbox = set{fsys: files}
	pgInbox  = set{fsys: subdir(inboxFiles, "inbox"), what: "inbox"}
)

// subdir returns the files of dir in fsys, an embedded directory that is
// known to exist.
func subdir(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

func (s set) all() ([]Migration, error) { return readMigrations(s.fsys, s.what) }

// latest is the set's highest version.
func (s set) latest() int {
	all, err := s.all()
	if err != nil || len(all) == 0 {
		return 0
	}
	return all[len(all)-1].Version
}

// named prefixes a table's name with the set's, in errors: "inbox table".
func (s set) named(table string) string {
	if strings.HasSuffix(s.what, "inbox") {
		return "inbox table " + table
	}
	return "table " + table
}

// Errors returned by Check (and ErrSchemaTooNew by Up and Down), for
// errors.Is.
var (
	// ErrNotMigrated means the outbox table or some of its migrations are
	// missing: run `relay migrate up`.
	ErrNotMigrated = errors.New("outbox schema is missing or out of date; run `relay migrate up`")
	// ErrSchemaTooNew means the database holds migrations this binary does
	// not know: it is older than the schema.
	ErrSchemaTooNew = errors.New("outbox schema is newer than this binary; upgrade the relay")
	// ErrNotPartitioned means a partition interval was given for a table
	// that exists and is not partitioned.
	ErrNotPartitioned = errors.New("outbox table exists and is not partitioned; PostgreSQL cannot partition it in place (docs/architecture.md#partitioned-tables)")
)

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	up      string
	down    string
}

// State is a migration and when it was applied (zero if pending).
type State struct {
	Migration
	AppliedAt time.Time
}

// Applied reports whether the migration has run.
func (s State) Applied() bool { return !s.AppliedAt.IsZero() }

// DB is what the runner needs: pgx.Conn and pgxpool.Pool satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

var fileRE = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// All returns the embedded migrations in version order.
func All() ([]Migration, error) { return pgOutbox.all() }

// readMigrations reads the migrations of fsys, each a pair of files
// NNN_name.up.sql and NNN_name.down.sql, in version order; what names
// the set in errors ("" for PostgreSQL's).
func readMigrations(fsys fs.FS, what string) ([]Migration, error) {
	prefix := ""
	if what != "" {
		prefix = what + " "
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: read embedded %sfiles: %w", prefix, err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: unexpected %sfile name %q", prefix, e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s%s: %w", prefix, e.Name(), err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if m[3] == "up" {
			mig.up = string(body)
		} else {
			mig.down = string(body)
		}
	}
	all := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("migrations: %sversion %03d lacks its up or down file", prefix, m.Version)
		}
		all = append(all, *m)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Version < all[j].Version })
	return all, nil
}

// Latest is the highest embedded version.
func Latest() int { return pgOutbox.latest() }

// Up applies every pending migration to table, in one transaction, and
// returns what it applied (nothing when the schema is current). It refuses
// a table that holds a newer version than it knows (ErrSchemaTooNew).
func Up(ctx context.Context, db DB, table outbox.Table) ([]Migration, error) {
	return UpWith(ctx, db, table, Options{})
}

// Options are the choices UpWith makes when it creates the table.
type Options struct {
	// PartitionInterval, when positive, creates the table partitioned by
	// time, one partition per interval (docs/architecture.md#partitioned-tables),
	// with the partitions of the current interval and PartitionsAhead
	// more. It must be a whole number of seconds, at least
	// MinPartitionInterval. A table that exists already keeps its shape:
	// UpWith refuses to migrate an unpartitioned table with a
	// PartitionInterval (ErrNotPartitioned), since PostgreSQL cannot
	// partition a table in place.
	PartitionInterval time.Duration
}

// UpWith is Up with Options for a table it creates.
func UpWith(ctx context.Context, db DB, table outbox.Table, opts Options) ([]Migration, error) {
	return up(ctx, db, pgOutbox, table, opts)
}

func up(ctx context.Context, db DB, s set, table outbox.Table, opts Options) ([]Migration, error) {
	all, err := s.all()
	if err != nil {
		return nil, err
	}
	if opts.PartitionInterval != 0 {
		if err := checkInterval(opts.PartitionInterval); err != nil {
			return nil, err
		}
	}
	var applied []Migration
	err = locked(ctx, db, s, table, func(tx pgx.Tx, done map[int]time.Time) error {
		sh, err := shapeOf(ctx, tx, table)
		if err != nil {
			return err
		}
		_, created := done[1]
		switch {
		case opts.PartitionInterval > 0 && created && !sh.Partitioned:
			return fmt.Errorf("table %s: %w", table, ErrNotPartitioned)
		case opts.PartitionInterval > 0 && !created:
			sh.Partitioned = true
		}
		for _, m := range all {
			if _, ok := done[m.Version]; ok {
				continue
			}
			if err := execTemplate(ctx, tx, table, sh, m, m.up); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+table.Related("migrations")+" (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("migrations: record %03d: %w", m.Version, err)
			}
			applied = append(applied, m)
		}
		if opts.PartitionInterval > 0 && !created {
			if _, err := createPartitions(ctx, tx, table, opts.PartitionInterval); err != nil {
				return err
			}
		}
		return nil
	})
	return applied, err
}

// Down reverts the most recently applied migration of table and returns it;
// ok is false when nothing was applied. Like Up, it refuses a table that
// holds a newer version than it knows (ErrSchemaTooNew).
func Down(ctx context.Context, db DB, table outbox.Table) (reverted Migration, ok bool, err error) {
	return down(ctx, db, pgOutbox, table)
}

func down(ctx context.Context, db DB, s set, table outbox.Table) (reverted Migration, ok bool, err error) {
	all, err := s.all()
	if err != nil {
		return Migration{}, false, err
	}
	err = locked(ctx, db, s, table, func(tx pgx.Tx, done map[int]time.Time) error {
		for i := len(all) - 1; i >= 0; i-- {
			m := all[i]
			if _, applied := done[m.Version]; !applied {
				continue
			}
			sh, err := shapeOf(ctx, tx, table)
			if err != nil {
				return err
			}
			if err := execTemplate(ctx, tx, table, sh, m, m.down); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+table.Related("migrations")+" WHERE version = $1", m.Version); err != nil {
				return fmt.Errorf("migrations: unrecord %03d: %w", m.Version, err)
			}
			reverted, ok = m, true
			return nil
		}
		return nil
	})
	return reverted, ok, err
}

// Status lists every embedded migration with its applied time, plus any
// applied version this binary does not know (Name "unknown"). It only reads:
// a user without DDL rights may run it.
func Status(ctx context.Context, q Querier, table outbox.Table) ([]State, error) {
	return status(ctx, q, pgOutbox, table)
}

func status(ctx context.Context, q Querier, s set, table outbox.Table) ([]State, error) {
	if err := table.Validate(); err != nil {
		return nil, err
	}
	all, err := s.all()
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table.Related("migrations")).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrations: look up %s: %w", table.Related("migrations"), err)
	}
	done := map[int]time.Time{}
	if exists {
		if done, err = appliedVersions(ctx, q, table); err != nil {
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

// appliedVersions reads the migrations table.
func appliedVersions(ctx context.Context, q Querier, table outbox.Table) (map[int]time.Time, error) {
	rows, err := q.Query(ctx, "SELECT version, applied_at FROM "+table.Related("migrations"))
	if err != nil {
		return nil, fmt.Errorf("migrations: read versions: %w", err)
	}
	done := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			return nil, fmt.Errorf("migrations: read versions: %w", err)
		}
		done[v] = at
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: read versions: %w", err)
	}
	return done, nil
}

// Querier is what Status and Check need: pgx.Conn, pgx.Tx and pgxpool.Pool
// satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Check verifies, without changing anything, that table exists and carries
// exactly the migrations this binary knows. The error wraps ErrNotMigrated or
// ErrSchemaTooNew and names the table.
func Check(ctx context.Context, q Querier, table outbox.Table) error {
	return check(ctx, q, pgOutbox, table)
}

func check(ctx context.Context, q Querier, s set, table outbox.Table) error {
	if err := table.Validate(); err != nil {
		return err
	}
	var outboxExists, migrationsExists bool
	err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
		table.Ident(), table.Related("migrations")).Scan(&outboxExists, &migrationsExists)
	if err != nil {
		return fmt.Errorf("migrations: look up table %s: %w", table, err)
	}
	if !outboxExists || !migrationsExists {
		return fmt.Errorf("%s: %w", s.named(table.String()), ErrNotMigrated)
	}
	var highest int
	if err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+table.Related("migrations")).Scan(&highest); err != nil {
		return fmt.Errorf("migrations: read versions of %s: %w", table, err)
	}
	switch latest := s.latest(); {
	case highest < latest:
		return fmt.Errorf("%s is at version %d, this binary needs %d: %w", s.named(table.String()), highest, latest, ErrNotMigrated)
	case highest > latest:
		return fmt.Errorf("%s is at version %d, this binary knows up to %d: %w", s.named(table.String()), highest, latest, ErrSchemaTooNew)
	}
	return nil
}

// locked runs fn in a transaction holding the table's migration lock, with
// the schema and the migrations table created if missing, and passes the
// applied versions. The transaction commits when fn succeeds.
func locked(ctx context.Context, db DB, s set, table outbox.Table, fn func(pgx.Tx, map[int]time.Time) error) error {
	if err := table.Validate(); err != nil {
		return err
	}
	table = table.WithDefaults()
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrations: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "outboxrelay.migrate:"+pgx.Identifier{table.Schema}.Sanitize()); err != nil {
		return fmt.Errorf("migrations: take lock: %w", err)
	}
	// Create only what is missing: CREATE SCHEMA IF NOT EXISTS needs the
	// CREATE privilege on the database even when the schema exists, which
	// the owner of an existing schema may lack.
	var schemaExists, tableExists bool
	err = tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), to_regclass($2) IS NOT NULL",
		table.Schema, table.Related("migrations")).Scan(&schemaExists, &tableExists)
	if err != nil {
		return fmt.Errorf("migrations: look up %s: %w", table, err)
	}
	var setup []string
	if !schemaExists {
		setup = append(setup, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{table.Schema}.Sanitize())
	}
	if !tableExists {
		setup = append(setup, `CREATE TABLE IF NOT EXISTS `+table.Related("migrations")+` (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`)
	}
	for _, stmt := range setup {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("migrations: prepare %s: %w", table, err)
		}
	}
	done, err := appliedVersions(ctx, tx, table)
	if err != nil {
		return err
	}
	// A newer binary migrated the table: Up has nothing it may do, and
	// Down would revert a migration the newer ones build on.
	highest := 0
	for v := range done {
		highest = max(highest, v)
	}
	if latest := s.latest(); highest > latest {
		return fmt.Errorf("%s is at version %d, this binary knows up to %d: %w", s.named(table.String()), highest, latest, ErrSchemaTooNew)
	}
	if err := fn(tx, done); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrations: commit: %w", err)
	}
	return nil
}

// shape is what a migration's template may ask about the table.
type shape struct {
	// Table is the quoted, schema-qualified table name.
	Table string
	// Partitioned is true for a table partitioned by range of id.
	Partitioned bool
}

// shapeOf reads the table's shape from the catalog; a table that does not
// exist yet is not partitioned.
func shapeOf(ctx context.Context, q Querier, table outbox.Table) (shape, error) {
	s := shape{Table: table.Ident()}
	var err error
	s.Partitioned, err = IsPartitioned(ctx, q, table)
	return s, err
}

// execTemplate renders a migration for table and runs it.
func execTemplate(ctx context.Context, tx pgx.Tx, table outbox.Table, sh shape, m Migration, body string) error {
	table = table.WithDefaults() // {{name}} derives from table.Name: "" must mean "outbox"
	t, err := template.New(m.Name).Funcs(template.FuncMap{
		"name":    func(suffix string) string { return pgx.Identifier{table.Name + "_" + suffix}.Sanitize() },
		"related": table.Related,
		"schema":  func() string { return pgx.Identifier{table.Schema}.Sanitize() },
		// literal quotes s as an SQL string.
		"literal": func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" },
	}).Parse(body)
	if err != nil {
		return fmt.Errorf("migrations: parse %03d_%s: %w", m.Version, m.Name, err)
	}
	var sql strings.Builder
	if err := t.Execute(&sql, sh); err != nil {
		return fmt.Errorf("migrations: render %03d_%s: %w", m.Version, m.Name, err)
	}
	if _, err := tx.Exec(ctx, sql.String()); err != nil {
		return fmt.Errorf("migrations: apply %03d_%s to %s: %w", m.Version, m.Name, table, err)
	}
	return nil
}

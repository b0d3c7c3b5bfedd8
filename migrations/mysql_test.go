package migrations

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
	"github.com/outboxrelay/outboxrelay/outbox"
)

func TestParseServerVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		raw       string
		want      ServerVersion
		supported bool
	}{
		{"10.11.19-MariaDB-0+deb12u1", ServerVersion{Flavor: "MariaDB", Major: 10, Minor: 11, Patch: 19}, true},
		{"8.0.36", ServerVersion{Flavor: "MySQL", Major: 8, Minor: 0, Patch: 36}, true},
		{"5.7.44", ServerVersion{Flavor: "MySQL", Major: 5, Minor: 7, Patch: 44}, false},
		{"10.5.2-MariaDB", ServerVersion{Flavor: "MariaDB", Major: 10, Minor: 5, Patch: 2}, false},
		{"10.6.0-MariaDB", ServerVersion{Flavor: "MariaDB", Major: 10, Minor: 6}, true},
		{"5.5.5-10.6.12-MariaDB-log", ServerVersion{Flavor: "MariaDB", Major: 10, Minor: 6, Patch: 12}, true},
		{"11.4.2-MariaDB", ServerVersion{Flavor: "MariaDB", Major: 11, Minor: 4, Patch: 2}, true},
		{"8.0.12", ServerVersion{Flavor: "MySQL", Major: 8, Minor: 0, Patch: 12}, false},
		{"8.0.13-log", ServerVersion{Flavor: "MySQL", Major: 8, Minor: 0, Patch: 13}, true},
		{"8.4.3-0ubuntu0.24.04.1", ServerVersion{Flavor: "MySQL", Major: 8, Minor: 4, Patch: 3}, true},
		{"9.1.0", ServerVersion{Flavor: "MySQL", Major: 9, Minor: 1}, true},
	}
	for _, c := range cases {
		got, err := ParseServerVersion(c.raw)
		if err != nil {
			t.Errorf("ParseServerVersion(%q): %v", c.raw, err)
			continue
		}
		c.want.Raw = c.raw
		if got != c.want {
			t.Errorf("ParseServerVersion(%q) = %+v, want %+v", c.raw, got, c.want)
		}
		err = checkServer(got, false, "ROW")
		if c.supported && err != nil {
			t.Errorf("%q refused: %v", c.raw, err)
		}
		if !c.supported {
			var unsupported *UnsupportedServerError
			if !errors.Is(err, ErrServerTooOld) || !errors.As(err, &unsupported) || unsupported.Version != got {
				t.Errorf("%q: got %v, want an *UnsupportedServerError wrapping ErrServerTooOld", c.raw, err)
			}
		}
	}
	for _, bad := range []string{"", "MariaDB", "eight", "8", "10.x.1-MariaDB", "1.2.3.4"} {
		if v, err := ParseServerVersion(bad); err == nil {
			t.Errorf("ParseServerVersion(%q) = %+v, want an error", bad, v)
		}
	}
}

func TestCheckServerBinlog(t *testing.T) {
	t.Parallel()
	v, err := ParseServerVersion("10.11.19-MariaDB-0+deb12u1")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		logBin bool
		format string
		refuse bool
	}{
		{true, "STATEMENT", true},
		{true, "statement", true},
		{true, "ROW", false},
		{true, "MIXED", false},
		{false, "STATEMENT", false}, // no binary log: nothing is replicated
		{false, "ROW", false},
	}
	for _, c := range cases {
		err := checkServer(v, c.logBin, c.format)
		if got := errors.Is(err, ErrStatementBinlog); got != c.refuse {
			t.Errorf("log_bin=%v binlog_format=%s: %v, want refused=%v", c.logBin, c.format, err, c.refuse)
		}
		if c.refuse && errors.Is(err, ErrServerTooOld) {
			t.Errorf("binlog refusal also claims the server is too old: %v", err)
		}
	}
}

// The server the tests run on is supported, and a session that sets
// binlog_format=STATEMENT while the server keeps no binary log is too.
func TestCheckMySQLServerOnRealServer(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	v, err := CheckMySQLServer(ctx, db)
	if err != nil {
		t.Fatalf("CheckMySQLServer: %v", err)
	}
	if v.Flavor != "MariaDB" && v.Flavor != "MySQL" || v.Major < 8 {
		t.Fatalf("server version %+v", v)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var logBin int
	if err := conn.QueryRowContext(ctx, "SELECT @@log_bin").Scan(&logBin); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION binlog_format = 'STATEMENT'"); err != nil {
		t.Fatal(err)
	}
	_, err = CheckMySQLServer(ctx, conn)
	if logBin == 1 && !errors.Is(err, ErrStatementBinlog) {
		t.Fatalf("binary log on, session STATEMENT: %v, want ErrStatementBinlog", err)
	}
	if logBin == 0 && err != nil {
		t.Fatalf("binary log off, session STATEMENT: %v, want no error", err)
	}
}

func TestMySQLUpDownStatus(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	table := outbox.Table{Name: "events"}
	all, err := AllMySQL()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 || LatestMySQL() != 5 {
		t.Fatalf("AllMySQL = %d migrations, LatestMySQL = %d", len(all), LatestMySQL())
	}

	if err := CheckMySQL(ctx, db, table); !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("CheckMySQL before up: %v, want ErrNotMigrated", err)
	}
	states, err := StatusMySQL(ctx, db, table)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Applied() {
			t.Fatalf("before up: %03d applied", s.Version)
		}
	}

	applied, err := UpMySQL(ctx, db, table)
	if err != nil {
		t.Fatalf("UpMySQL: %v", err)
	}
	if len(applied) != len(all) {
		t.Fatalf("UpMySQL applied %d, want %d", len(applied), len(all))
	}
	if err := CheckMySQL(ctx, db, table); err != nil {
		t.Fatalf("CheckMySQL after up: %v", err)
	}
	again, err := UpMySQL(ctx, db, table)
	if err != nil || len(again) != 0 {
		t.Fatalf("second UpMySQL: applied %d, %v; want nothing", len(again), err)
	}
	states, err = StatusMySQL(ctx, db, table)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != len(all) {
		t.Fatalf("StatusMySQL: %d states", len(states))
	}
	for _, s := range states {
		if !s.Applied() {
			t.Fatalf("after up: %03d %s not applied", s.Version, s.Name)
		}
	}
	for _, name := range []string{"events", "events_jobs", "events_audit", "events_migrations"} {
		if !tableExists(t, db, name) {
			t.Fatalf("table %s missing after up", name)
		}
	}
	var jobs int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM events_jobs WHERE job = 'retention' AND next_run_at <= UTC_TIMESTAMP(6)").Scan(&jobs); err != nil || jobs != 1 {
		t.Fatalf("retention job rows due: %d, %v; want 1", jobs, err)
	}

	for i := len(all) - 1; i >= 0; i-- {
		want := all[i].Version
		m, ok, err := DownMySQL(ctx, db, table)
		if err != nil || !ok || m.Version != want {
			t.Fatalf("DownMySQL = %03d, %v, %v; want %03d", m.Version, ok, err, want)
		}
		if err := CheckMySQL(ctx, db, table); !errors.Is(err, ErrNotMigrated) {
			t.Fatalf("CheckMySQL after down to %d: %v, want ErrNotMigrated", want-1, err)
		}
	}
	for _, name := range []string{"events", "events_jobs", "events_audit"} {
		if tableExists(t, db, name) {
			t.Fatalf("table %s still there after down", name)
		}
	}
	if _, ok, err := DownMySQL(ctx, db, table); ok || err != nil {
		t.Fatalf("DownMySQL with nothing applied: ok=%v, %v", ok, err)
	}
}

// The outbox table compares text byte for byte: dedup keys that differ
// only in case are distinct, and an equal one is refused.
func TestMySQLSchemaIsCaseSensitiveAndUTC(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	if _, err := UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	insert := func(id byte, dedup string) error {
		_, err := db.ExecContext(ctx, "INSERT INTO outbox (id, topic, payload, dedup_key) VALUES (?, 't', 'p', ?)",
			append(make([]byte, 15), id), dedup)
		return err
	}
	if err := insert(1, "Order-1"); err != nil {
		t.Fatal(err)
	}
	if err := insert(2, "order-1"); err != nil {
		t.Fatalf("a dedup key differing in case was refused: %v", err)
	}
	var me *mysql.MySQLError
	if err := insert(3, "Order-1"); !errors.As(err, &me) || me.Number != 1062 {
		t.Fatalf("a repeated dedup key: %v, want duplicate key error 1062", err)
	}
	// Defaults are UTC whatever the session's time zone.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET time_zone = '+05:00'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO outbox (id, topic, payload) VALUES (?, 't', 'p')", append(make([]byte, 15), 4)); err != nil {
		t.Fatal(err)
	}
	var skew float64
	err = conn.QueryRowContext(ctx, "SELECT ABS(TIMESTAMPDIFF(SECOND, created_at, UTC_TIMESTAMP(6))) FROM outbox WHERE id = ?", append(make([]byte, 15), 4)).Scan(&skew)
	if err != nil || skew > 60 {
		t.Fatalf("created_at is %v s from UTC (%v) in a +05:00 session", skew, err)
	}
	var headers, status string
	if err := conn.QueryRowContext(ctx, "SELECT headers, status FROM outbox WHERE id = ?", append(make([]byte, 15), 4)).Scan(&headers, &status); err != nil || headers != "{}" || status != "pending" {
		t.Fatalf("defaults: headers %q, status %q, %v", headers, status, err)
	}
	if _, err := conn.ExecContext(ctx, "UPDATE outbox SET status = 'lost' WHERE id = ?", append(make([]byte, 15), 4)); !errors.As(err, &me) {
		t.Fatalf("an unknown status was accepted: %v", err)
	}
}

// A migration cut short (its version not recorded) runs again whole.
func TestMySQLUpRerunsUnrecordedMigration(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	if _, err := UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM outbox_migrations WHERE version >= 2"); err != nil {
		t.Fatal(err)
	}
	applied, err := UpMySQL(ctx, db, outbox.Table{})
	if err != nil {
		t.Fatalf("UpMySQL over a half-recorded schema: %v", err)
	}
	all, err := AllMySQL()
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(all)-1 || applied[0].Version != 2 {
		t.Fatalf("applied %v, want every migration from 002", applied)
	}
	var jobs int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_jobs").Scan(&jobs); err != nil || jobs != 1 {
		t.Fatalf("jobs rows after re-run: %d, %v; want 1", jobs, err)
	}
	if err := CheckMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
}

func TestMySQLConcurrentMigrators(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	const n = 4
	var wg sync.WaitGroup
	results := make([][]Migration, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { results[i], errs[i] = UpMySQL(ctx, db, outbox.Table{}) })
	}
	wg.Wait()
	total := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		total += len(results[i])
	}
	all, err := AllMySQL()
	if err != nil {
		t.Fatal(err)
	}
	if total != len(all) {
		t.Fatalf("%d migrators applied %d migrations in all, want %d (each once)", n, total, len(all))
	}
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_migrations").Scan(&rows); err != nil || rows != len(all) {
		t.Fatalf("version rows %d, %v", rows, err)
	}
}

func TestMySQLSchemaTooNew(t *testing.T) {
	t.Parallel()
	db, _ := mariadbtest.DB(t)
	ctx := context.Background()
	if _, err := UpMySQL(ctx, db, outbox.Table{}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO outbox_migrations (version, name) VALUES (99, 'future')"); err != nil {
		t.Fatal(err)
	}
	if _, err := UpMySQL(ctx, db, outbox.Table{}); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("UpMySQL: %v, want ErrSchemaTooNew", err)
	}
	if _, _, err := DownMySQL(ctx, db, outbox.Table{}); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("DownMySQL: %v, want ErrSchemaTooNew", err)
	}
	if err := CheckMySQL(ctx, db, outbox.Table{}); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("CheckMySQL: %v, want ErrSchemaTooNew", err)
	}
	states, err := StatusMySQL(ctx, db, outbox.Table{})
	if err != nil {
		t.Fatal(err)
	}
	if last := states[len(states)-1]; last.Version != 99 || last.Name != "unknown" || !last.Applied() {
		t.Fatalf("StatusMySQL's last state %+v, want the unknown 099", last)
	}
}

// A table named with its database works from a connection with no
// database; without one, the functions say so.
func TestMySQLQualifiedAndNoDatabase(t *testing.T) {
	t.Parallel()
	_, dsn := mariadbtest.DB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	dbName := cfg.DBName
	cfg.DBName = ""
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	bare := sql.OpenDB(connector)
	defer bare.Close()
	ctx := context.Background()

	if _, err := UpMySQL(ctx, bare, outbox.Table{Name: "outbox"}); !errors.Is(err, ErrNoDatabase) {
		t.Fatalf("UpMySQL without a database: %v, want ErrNoDatabase", err)
	}
	if err := CheckMySQL(ctx, bare, outbox.Table{}); !errors.Is(err, ErrNoDatabase) {
		t.Fatalf("CheckMySQL without a database: %v, want ErrNoDatabase", err)
	}
	table := outbox.Table{Schema: dbName, Name: "qualified"}
	if _, err := UpMySQL(ctx, bare, table); err != nil {
		t.Fatalf("UpMySQL %s: %v", table, err)
	}
	if err := CheckMySQL(ctx, bare, table); err != nil {
		t.Fatalf("CheckMySQL %s: %v", table, err)
	}
	if got := MySQLIdent(table); got != "`"+dbName+"`.`qualified`" {
		t.Fatalf("MySQLIdent = %s", got)
	}
	if _, err := UpMySQL(ctx, bare, outbox.Table{Schema: dbName, Name: "bad-name"}); !errors.Is(err, outbox.ErrInvalidIdentifier) {
		t.Fatalf("UpMySQL with an invalid name: %v, want ErrInvalidIdentifier", err)
	}
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A server that writes a statement-based binary log is refused, by the
// check and by UpMySQL, unless the session logs rows.
func TestMySQLRefusesStatementBinlog(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Private(t, "--log-bin", "--binlog-format=STATEMENT", "--server-id=1")
	db, _ := srv.DB(t)
	ctx := context.Background()
	_, err := CheckMySQLServer(ctx, db)
	var unsupported *UnsupportedServerError
	if !errors.Is(err, ErrStatementBinlog) || !errors.As(err, &unsupported) || unsupported.BinlogFormat != "STATEMENT" {
		t.Fatalf("CheckMySQLServer on a STATEMENT binlog: %v, want ErrStatementBinlog", err)
	}
	if _, err := UpMySQL(ctx, db, outbox.Table{}); !errors.Is(err, ErrStatementBinlog) {
		t.Fatalf("UpMySQL on a STATEMENT binlog: %v, want ErrStatementBinlog", err)
	}
	if tableExists(t, db, "outbox") || tableExists(t, db, "outbox_migrations") {
		t.Fatal("UpMySQL refused the server but created tables")
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, format := range []string{"ROW", "MIXED"} {
		if _, err := conn.ExecContext(ctx, "SET SESSION binlog_format = '"+format+"'"); err != nil {
			t.Fatal(err)
		}
		if _, err := CheckMySQLServer(ctx, conn); err != nil {
			t.Fatalf("binlog_format=%s: %v", format, err)
		}
	}
}

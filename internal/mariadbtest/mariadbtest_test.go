package mariadbtest_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/mariadbtest"
)

func TestDBIsFreshAndUTC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := mariadbtest.DB(t)
	var name, tz string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE(), @@session.time_zone").Scan(&name, &tz); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "test_") || !strings.Contains(dsn, "/"+name+"?") {
		t.Fatalf("database %q, dsn %q: want a fresh test_ database named in the DSN", name, dsn)
	}
	if tz != "+00:00" {
		t.Fatalf("session time_zone %q, want +00:00", tz)
	}
	var tables int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("fresh database has %d tables", tables)
	}
	// parseTime and loc=UTC: a DATETIME scans into a UTC time.Time.
	var now time.Time
	if err := db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if now.Location() != time.UTC || time.Since(now).Abs() > time.Minute {
		t.Fatalf("UTC_TIMESTAMP scanned as %v", now)
	}
}

func TestDBIsDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("inner", func(t *testing.T) {
		db, _ := mariadbtest.DB(t)
		if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	other, _ := mariadbtest.DB(t)
	var n int
	if err := other.QueryRow("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if name == "" || n != 0 {
		t.Fatalf("database %q still exists after its test ended (%d)", name, n)
	}
}

func TestParseDSNAcceptsURL(t *testing.T) {
	t.Parallel()
	cfg, err := mariadbtest.ParseDSN("mysql://app:p%40ss@db.example:3307/shop?charset=utf8mb4")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "app" || cfg.Passwd != "p@ss" || cfg.Addr != "db.example:3307" || cfg.DBName != "shop" ||
		!cfg.ParseTime || cfg.Loc != time.UTC || cfg.Params["time_zone"] != "'+00:00'" {
		t.Fatalf("parsed %+v", cfg)
	}
	cfg, err = mariadbtest.ParseDSN("mysql://root@localhost/")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "localhost:3306" || cfg.User != "root" {
		t.Fatalf("parsed %+v", cfg)
	}
}

// TestPrivateSurvivesKill starts a private server, writes a committed row,
// kills the server like a crash, starts it again on the same data and
// reads the row back.
func TestPrivateSurvivesKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := mariadbtest.Private(t)
	db, _ := srv.DB(t)
	db.SetMaxIdleConns(0) // no pooled connection outlives the crash
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1, 'durable')"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO t VALUES (2, 'uncommitted')"); err != nil {
		t.Fatal(err)
	}

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("killed server still answers")
	}
	_ = tx.Rollback() // its connection died with the server

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, "SELECT id, v FROM t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id int
		var v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "durable" {
		t.Fatalf("after kill and start: rows %q, want [durable]", got)
	}

	if err := srv.Start(); err == nil {
		t.Fatal("Start of a running server succeeded")
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after stop and start: %d rows, %v", n, err)
	}
	if !srv.Running() {
		t.Fatal("Running is false after Start")
	}
	// A test may end with its server down: cleanup then has nothing to drop.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if srv.Running() {
		t.Fatal("Running is true after Kill")
	}
}

// recorder is a testing.TB whose Skip and Fatal end only the goroutine
// that called them and record which one it was.
type recorder struct {
	testing.TB
	ended string
}

func (r *recorder) Skip(args ...any)  { r.ended = "skip: " + fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatal(args ...any) { r.ended = "fatal: " + fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.ended = "fatal: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestDBUnreachable: a server that does not answer skips the test with the
// reason, or fails it when CI=true.
func TestDBUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	t.Setenv(mariadbtest.EnvURL, "root@tcp("+addr+")/")
	for ci, want := range map[string]string{"": "skip: ", "true": "fatal: "} {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			mariadbtest.DB(r)
		}()
		<-done
		if !strings.HasPrefix(r.ended, want) || !strings.Contains(r.ended, addr) || !strings.Contains(r.ended, mariadbtest.EnvURL) {
			t.Errorf("CI=%q: DB ended with %q, want %q naming %s and %s", ci, r.ended, want, addr, mariadbtest.EnvURL)
		}
	}
}

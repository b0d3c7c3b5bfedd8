package mariadbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/outboxrelay/outboxrelay/internal/mysqldsn"
)

// EnvURL names the variable holding the shared test server, either as a
// go-sql-driver/mysql DSN (root@tcp(127.0.0.1:3306)/) or as a URL
// (mysql://root@127.0.0.1:3306/). A database name in it is ignored: DB
// creates its own.
const EnvURL = "OUTBOX_TEST_MYSQL_URL"

// DefaultDSN is the shared test server used when EnvURL is unset.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/"

// pingTimeout bounds how long DB waits for the shared server to answer.
const pingTimeout = 5 * time.Second

// DB creates a fresh database test_<random> on the shared test server and
// returns a pool on it and its DSN (go-sql-driver/mysql form, with
// parseTime=true, loc=UTC and time_zone='+00:00'). The pool is closed and
// the database dropped when the test ends. When the server does not answer,
// DB skips the test with the reason, or fails it when the environment
// variable CI is "true".
func DB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	raw := os.Getenv(EnvURL)
	if raw == "" {
		raw = DefaultDSN
	}
	cfg, err := ParseDSN(raw)
	if err != nil {
		t.Fatalf("%s: %v", EnvURL, err)
	}
	return newDatabase(t, cfg, nil, func(err error) {
		t.Helper()
		msg := fmt.Sprintf("no MariaDB/MySQL test server at %s (set %s, e.g. root@tcp(127.0.0.1:3306)/, or start one): %v", cfg.Addr, EnvURL, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	})
}

// ParseDSN reads a go-sql-driver/mysql DSN or a mysql:// (or mariadb://)
// URL (mysql://user:password@host:port/database?param=value), as
// internal/mysqldsn does, and returns its config with the session settings
// of this package applied.
func ParseDSN(raw string) (*mysql.Config, error) {
	cfg, err := mysqldsn.Parse(raw)
	if err != nil {
		return nil, err
	}
	withSession(cfg)
	return cfg, nil
}

// withSession sets the settings every connection of this package has.
func withSession(cfg *mysql.Config) {
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if cfg.Timeout == 0 {
		cfg.Timeout = pingTimeout
	}
}

// newDatabase creates test_<random> on the server of base, calling
// unreachable when that server does not answer. At cleanup the database is
// dropped unless gone (nil means never) says the server and its data are
// gone anyway.
func newDatabase(t testing.TB, base *mysql.Config, gone func() bool, unreachable func(error)) (*sql.DB, string) {
	t.Helper()
	admin := base.Clone()
	admin.DBName = ""
	adminDB, err := open(admin)
	if err != nil {
		t.Fatalf("mariadbtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := adminDB.PingContext(ctx); err != nil {
		_ = adminDB.Close()
		var serverErr *mysql.MySQLError
		if errors.As(err, &serverErr) {
			// The server answered and refused: a setup error, never a skip.
			t.Fatalf("mariadbtest: connect to %s: %v", base.Addr, err)
		}
		unreachable(err)
		return nil, "" // unreachable fails or skips the test; not reached
	}

	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "test_" + hex.EncodeToString(b[:])
	if _, err := adminDB.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		_ = adminDB.Close()
		t.Fatalf("mariadbtest: create database %s: %v", name, err)
	}

	cfg := base.Clone()
	cfg.DBName = name
	db, err := open(cfg)
	if err != nil {
		_ = adminDB.Close()
		t.Fatalf("mariadbtest: %v", err)
	}
	t.Cleanup(func() {
		defer adminDB.Close()
		if err := db.Close(); err != nil {
			t.Errorf("mariadbtest: close pool: %v", err)
		}
		if gone != nil && gone() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := adminDB.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("mariadbtest: drop database %s: %v", name, err)
		}
	})
	return db, cfg.FormatDSN()
}

func open(cfg *mysql.Config) (*sql.DB, error) {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connector: %w", err)
	}
	return sql.OpenDB(conn), nil
}

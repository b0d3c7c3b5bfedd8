// Package testdb gives each test its own PostgreSQL schema with the outbox
// table migrated, on the server named by OUTBOX_TEST_DATABASE_URL, or on a
// throwaway Docker container when that is unset and a Docker engine answers.
// With neither, tests fail with a message saying how to provide a database:
// they never skip.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/dockertest/v3"
	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/migrations"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// EnvURL names the variable holding the test database URL.
const EnvURL = "OUTBOX_TEST_DATABASE_URL"

// EnvPartitionInterval names the variable that, set to a duration such as
// "1h", makes New create partitioned tables with that interval, so that a
// package's tests run against the partitioned shape
// (docs/architecture.md#partitioned-tables).
const EnvPartitionInterval = "OUTBOX_TEST_PARTITION_INTERVAL"

var (
	urlOnce sync.Once
	baseURL string
	urlErr  error
)

// URL returns the URL of the test server, starting a Docker container on
// first use when EnvURL is unset. It fails the test when there is neither.
func URL(t testing.TB) string {
	t.Helper()
	urlOnce.Do(func() {
		if baseURL = os.Getenv(EnvURL); baseURL != "" {
			return
		}
		baseURL, urlErr = startDocker()
	})
	if urlErr != nil {
		t.Fatalf("no test database: set %s (e.g. postgres://postgres@127.0.0.1:5432/postgres) or run a Docker engine: %v", EnvURL, urlErr)
	}
	return baseURL
}

// startDocker runs postgres:15 in a container that expires after 10 minutes.
func startDocker() (string, error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return "", fmt.Errorf("docker: %w", err)
	}
	if err := pool.Client.Ping(); err != nil {
		return "", fmt.Errorf("docker engine does not answer: %w", err)
	}
	res, err := pool.Run("postgres", "15", []string{"POSTGRES_HOST_AUTH_METHOD=trust"})
	if err != nil {
		return "", fmt.Errorf("docker: start postgres: %w", err)
	}
	_ = res.Expire(600)
	url := "postgres://postgres@" + res.GetHostPort("5432/tcp") + "/postgres"
	pool.MaxWait = time.Minute
	err = pool.Retry(func() error {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			return err
		}
		return conn.Close(context.Background())
	})
	return url, err
}

// New creates a fresh schema with the outbox table migrated and returns a
// pool and the table. The schema is dropped when the test ends.
func New(t testing.TB) (*pgxpool.Pool, outbox.Table) {
	t.Helper()
	pool, table := NewEmpty(t)
	if _, err := migrations.UpWith(context.Background(), pool, table, Options(t)); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool, table
}

// NewUnpartitioned is New for tests of what only an unpartitioned table
// has (its own VACUUM counters, CREATE INDEX CONCURRENTLY, its relation
// file): the table is never partitioned.
func NewUnpartitioned(t testing.TB) (*pgxpool.Pool, outbox.Table) {
	t.Helper()
	pool, table := NewEmpty(t)
	if _, err := migrations.Up(context.Background(), pool, table); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool, table
}

// Options are the migration options New uses: a partition interval when
// EnvPartitionInterval is set.
func Options(t testing.TB) migrations.Options {
	t.Helper()
	v := os.Getenv(EnvPartitionInterval)
	if v == "" {
		return migrations.Options{}
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", EnvPartitionInterval, v, err)
	}
	return migrations.Options{PartitionInterval: d}
}

// Partitioned reports whether New creates partitioned tables.
func Partitioned() bool { return os.Getenv(EnvPartitionInterval) != "" }

// NewEmpty is New without migrating: the schema does not exist yet.
func NewEmpty(t testing.TB) (*pgxpool.Pool, outbox.Table) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, URL(t))
	if err != nil {
		t.Fatalf("connect to test database: %v", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	table := outbox.Table{Schema: "test_" + hex.EncodeToString(b[:]), Name: "outbox"}
	t.Cleanup(func() {
		defer pool.Close()
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{table.Schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop test schema: %v", err)
		}
	})
	return pool, table
}

// NewSQLASCII is New in a database of its own, created on the test server
// with encoding SQL_ASCII and dropped when the test ends. Its text columns
// take any bytes but NUL, as a client that does not check UTF-8 may leave
// them, so that a test can hand the relay a topic that is not UTF-8 (a
// UTF8 database refuses it). It returns the database's URL too.
func NewSQLASCII(t testing.TB) (pool *pgxpool.Pool, table outbox.Table, dbURL string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, URL(t))
	if err != nil {
		t.Fatalf("connect to test database: %v", err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "test_ascii_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), URL(t))
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(URL(t))
	if err != nil {
		t.Fatalf("%s: %v", EnvURL, err)
	}
	u.Path = "/" + name
	dbURL = u.String()
	if pool, err = pgxpool.New(ctx, dbURL); err != nil {
		t.Fatalf("connect to %s: %v", name, err)
	}
	t.Cleanup(pool.Close) // before the drop: cleanups run last first
	table = outbox.Table{Schema: "public", Name: "outbox"}
	if _, err := migrations.UpWith(ctx, pool, table, Options(t)); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool, table, dbURL
}

// AwaitSent waits up to within for n rows of table to be sent, and fails
// the test with the count it last saw if they are not. within only guards
// against a hang: it is raised to a minute, which a busy machine needs.
func AwaitSent(t testing.TB, pool *pgxpool.Pool, table outbox.Table, n int, within time.Duration) {
	t.Helper()
	within = max(within, time.Minute)
	deadline := time.Now().Add(within)
	for {
		var sent int
		err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table.Ident()+" WHERE status = 'sent'").Scan(&sent)
		if err != nil {
			t.Fatal(err)
		}
		if sent == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rows sent after %v", sent, n, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Proxied starts a faultproxy in front of the server cfg names and points
// cfg at it, with no TLS attempt and no fallback (a fallback would dial
// the server directly, around the proxy). The proxy closes when t ends,
// after the cleanups registered later have run; Close is idempotent, so a
// caller may close it earlier.
func Proxied(t testing.TB, cfg *pgxpool.Config) *faultproxy.Proxy {
	t.Helper()
	proxy, err := faultproxy.Start(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	return proxy
}

package pgserver_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxrelay/outboxrelay/internal/pgserver"
)

// mainPort is the machine's shared server, which these tests never touch.
const mainPort = 5432

// testBundle is a started server and a context bounding the test.
type testBundle struct {
	ctx context.Context
	srv *pgserver.Server
}

// setup starts a server with opts and closes it when the test ends. It fails,
// never skips, when PostgreSQL is not installed.
func setup(t *testing.T, opts pgserver.Options) *testBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	began := time.Now()
	srv, err := pgserver.Start(ctx, opts)
	if errors.Is(err, pgserver.ErrNoBinaries) {
		t.Fatalf("these tests need a PostgreSQL server installation: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("postgres log:\n%s", srv.LogTail(40))
		}
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if srv.Port() == mainPort {
		t.Fatalf("the test server took the main server's port %d", mainPort)
	}
	return &testBundle{ctx: ctx, srv: srv}
}

// connect opens a connection to the test server, closed when the test ends.
func (b *testBundle) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.srv.URL("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// restart restarts the server in mode and logs how long that took.
func (b *testBundle) restart(t *testing.T, mode string) {
	t.Helper()
	began := time.Now()
	if err := b.srv.Restart(b.ctx, mode); err != nil {
		t.Fatalf("Restart(%q): %v", mode, err)
	}
	t.Logf("Restart(%q) took %v", mode, time.Since(began).Round(time.Millisecond))
}

// count returns the number of rows in table t.
func count(t *testing.T, ctx context.Context, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

func TestRestartImmediateKeepsCommittedRows(t *testing.T) {
	t.Parallel()
	b := setup(t, pgserver.Options{})
	port := b.srv.Port()
	conn := b.connect(t)
	if _, err := conn.Exec(b.ctx, "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(b.ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}

	b.restart(t, pgserver.ImmediateMode)

	if b.srv.Port() != port {
		t.Errorf("port changed from %d to %d", port, b.srv.Port())
	}
	if _, err := conn.Exec(b.ctx, "SELECT 1"); err == nil {
		t.Error("a connection open during an immediate restart still works")
	}
	conn2 := b.connect(t)
	if n := count(t, b.ctx, conn2); n != 1 {
		t.Errorf("%d rows after the crash, want the committed 1", n)
	}
	if log := b.srv.LogTail(100); !strings.Contains(log, "automatic recovery in progress") {
		t.Errorf("no crash recovery in the log:\n%s", log)
	}
}

func TestRestartFast(t *testing.T) {
	t.Parallel()
	b := setup(t, pgserver.Options{})
	conn := b.connect(t)
	if _, err := conn.Exec(b.ctx, "CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.Restart(b.ctx, "smart"); err == nil {
		t.Fatal("Restart accepted mode smart")
	}
	if _, err := conn.Exec(b.ctx, "SELECT 1"); err != nil {
		t.Fatalf("Restart with an unknown mode disturbed the server: %v", err)
	}

	b.restart(t, pgserver.FastMode)

	if _, err := conn.Exec(b.ctx, "SELECT 1"); err == nil {
		t.Error("a connection open during a fast restart still works")
	}
	if n := count(t, b.ctx, b.connect(t)); n != 2 {
		t.Errorf("%d rows after the restart, want 2", n)
	}
	if log := b.srv.LogTail(100); strings.Contains(log, "automatic recovery in progress") {
		t.Errorf("a fast restart went through crash recovery:\n%s", log)
	}
}

func TestStopIsIdempotentAndRestartStarts(t *testing.T) {
	t.Parallel()
	b := setup(t, pgserver.Options{})
	for range 2 {
		if err := b.srv.Stop(b.ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	if conn, err := pgx.Connect(b.ctx, b.srv.URL("postgres")); err == nil {
		_ = conn.Close(b.ctx)
		t.Fatal("a stopped server accepts connections")
	}
	b.restart(t, pgserver.FastMode)
	b.connect(t)
}

// The server is the one in Dir, on 127.0.0.1 only, with the fast defaults
// and the extra settings.
func TestOwnServerAndSettings(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	b := setup(t, pgserver.Options{Port: port, Settings: map[string]string{"work_mem": "7MB", "MAX_CONNECTIONS": "150"}})
	if b.srv.Port() != port {
		t.Fatalf("Port() = %d, want %d", b.srv.Port(), port)
	}
	want := "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/app?sslmode=disable"
	if got := b.srv.URL("app"); got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	conn := b.connect(t)
	for name, want := range map[string]string{
		"data_directory":     filepath.Join(b.srv.Dir(), "data"),
		"listen_addresses":   "127.0.0.1",
		"port":               strconv.Itoa(port),
		"fsync":              "off",
		"full_page_writes":   "off",
		"synchronous_commit": "on",
		"max_connections":    "150",
		"shared_buffers":     "128MB",
		"work_mem":           "7MB",
		"server_encoding":    "UTF8",
	} {
		var got string
		if err := conn.QueryRow(b.ctx, "SELECT current_setting($1)", name).Scan(&got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	t.Parallel()
	b := setup(t, pgserver.Options{})
	dir := b.srv.Dir()
	pid := postmasterPID(t, dir)
	if err := b.srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after Close: %v", dir, err)
	}
	if b.srv.LogTail(10) != "" {
		t.Error("LogTail returns lines after Close")
	}
	proc, err := os.FindProcess(pid)
	if err == nil {
		if err := proc.Signal(syscall.Signal(0)); !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("postmaster %d still runs after Close (%v)", pid, err)
		}
	}
	if err := b.srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := b.srv.Restart(b.ctx, pgserver.FastMode); !errors.Is(err, pgserver.ErrClosed) {
		t.Errorf("Restart after Close = %v, want ErrClosed", err)
	}
}

// postmasterPID reads the pid from the data directory's postmaster.pid.
func postmasterPID(t *testing.T, dir string) int {
	t.Helper()
	buf, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(buf), "\n", 2)[0])
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	return pid
}

// A failed Start says why, quotes the server's log and leaves nothing behind.
func TestStartFailureQuotesLogAndCleansUp(t *testing.T) {
	t.Parallel()
	parent, err := os.MkdirTemp("", "pgserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil { // reachable by the postgres OS user
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	srv, err := pgserver.Start(ctx, pgserver.Options{Dir: parent, Settings: map[string]string{"shared_buffers": "lots"}})
	if err == nil {
		_ = srv.Close()
		t.Fatal("Start succeeded with an invalid setting")
	}
	if errors.Is(err, pgserver.ErrNoBinaries) {
		t.Fatalf("these tests need a PostgreSQL server installation: %v", err)
	}
	for _, want := range []string{"start postgres", "postgres log", `invalid value for parameter "shared_buffers"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("a failed Start left %v in %s", entries, parent)
	}
}

// A port already taken fails Start at once, without talking to whatever
// holds it: the main server's port is never connected to.
func TestStartOnTakenPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{})
	go func() {
		if conn, err := l.Accept(); err == nil {
			_ = conn.Close()
			close(accepted)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := pgserver.Start(ctx, pgserver.Options{Port: l.Addr().(*net.TCPAddr).Port})
	if err == nil {
		_ = srv.Close()
		t.Fatal("Start succeeded on a taken port")
	}
	if !strings.Contains(err.Error(), "port in use") {
		t.Errorf("error does not say the port is in use: %v", err)
	}
	select {
	case <-accepted:
		t.Error("Start connected to the port's holder")
	default:
	}
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts pgserver.Options
		want string
	}{
		{"negative port", pgserver.Options{Port: -1}, "outside 0-65535"},
		{"port too high", pgserver.Options{Port: 70000}, "outside 0-65535"},
		{"reserved setting", pgserver.Options{Settings: map[string]string{"Port": "5432"}}, "managed by pgserver"},
		{"listen_addresses", pgserver.Options{Settings: map[string]string{"listen_addresses": "*"}}, "managed by pgserver"},
		{"bad name", pgserver.Options{Settings: map[string]string{"a=b": "c"}}, "invalid setting name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pgserver.Start(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// Running as root, a Dir the postgres OS user cannot enter is refused with
// a message saying so, before initdb fails obscurely.
func TestUnreachableDirAsRoot(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		return // only root hands the server to another OS user
	}
	_, err := pgserver.Start(context.Background(), pgserver.Options{Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "cannot enter") {
		t.Errorf("Start in a mode 0700 t.TempDir = %v, want a cannot-enter error", err)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

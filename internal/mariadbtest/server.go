package mariadbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	// startTimeout bounds the wait for mariadbd to accept connections,
	// including InnoDB crash recovery after Kill.
	startTimeout = 2 * time.Minute
	// stopTimeout bounds a clean shutdown before Stop kills the server.
	stopTimeout = time.Minute
)

// Server is a mariadbd of one test's own, started by Private. Root connects
// over TCP on 127.0.0.1 with an empty password. Its methods are safe for
// concurrent use.
type Server struct {
	t       testing.TB
	bin     string
	dir     string // holds data/, the socket, the pid and the error log
	port    int
	args    []string
	baseCfg *mysql.Config

	mu   sync.Mutex
	proc *exec.Cmd     // nil while stopped
	done chan struct{} // closed when proc has exited
}

// Private initialises a data directory with mariadb-install-db, starts
// mariadbd on a free port of 127.0.0.1 and returns once it accepts
// connections. args are extra mariadbd options, e.g. "--log-bin",
// "--binlog-format=ROW". The server is stopped and its files removed when
// the test ends. Private fails the test when mariadbd or mariadb-install-db
// is missing or the server does not start.
//
// Root is created with ordinary password authentication and an empty
// password (mariadb-install-db --auth-root-authentication-method=normal),
// since the default unix_socket authentication refuses TCP; grant tables
// stay on. When the test runs as root, mariadbd runs with --user=root.
func Private(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := binary("mariadbd", "/usr/sbin/mariadbd")
	if err != nil {
		t.Fatalf("mariadbtest: %v", err)
	}
	install, err := binary("mariadb-install-db", "/usr/bin/mariadb-install-db")
	if err != nil {
		t.Fatalf("mariadbtest: %v", err)
	}
	// A short directory of our own: the unix socket path must stay under
	// 108 bytes, which t.TempDir's test-named paths can exceed.
	dir, err := os.MkdirTemp("", "mariadbtest")
	if err != nil {
		t.Fatalf("mariadbtest: %v", err)
	}
	s := &Server{t: t, bin: bin, dir: dir, args: args}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("mariadbtest: stop: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("mariadbtest: remove %s: %v", dir, err)
		}
	})

	cmdArgs := []string{"--no-defaults", "--datadir=" + s.dataDir(),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}
	if os.Geteuid() == 0 {
		cmdArgs = append(cmdArgs, "--user=root")
	}
	if err := installDB(install, s.dataDir(), cmdArgs); err != nil {
		t.Fatalf("mariadbtest: %v", err)
	}
	if err := s.startOnFreePort(); err != nil {
		t.Fatalf("mariadbtest: %v", err)
	}
	return s
}

// installDB runs mariadb-install-db into dataDir, again into an empty
// directory when it fails: its bootstrap mariadbd now and then dies of a
// segmentation fault (seen with 10.11.19 on a busy machine), which says
// nothing of the code under test.
func installDB(install, dataDir string, args []string) error {
	var err error
	var out []byte
	for range 3 {
		if out, err = exec.Command(install, args...).CombinedOutput(); err == nil {
			return nil
		}
		if rmErr := os.RemoveAll(dataDir); rmErr != nil {
			return fmt.Errorf("%s: %v; remove %s: %w", install, err, dataDir, rmErr)
		}
	}
	return fmt.Errorf("%s, three times: %w\n%s", install, err, out)
}

// binary finds name on PATH, else at fallback.
func binary(name, fallback string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	return "", fmt.Errorf("%s not found on PATH nor at %s (Debian: apt-get install mariadb-server)", name, fallback)
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "error.log") }

// startOnFreePort picks a free port and starts there, trying another port
// when the one picked was taken before mariadbd could bind it.
func (s *Server) startOnFreePort() error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			return err
		}
		s.port = port
		s.baseCfg = s.config()
		if err = s.Start(); err == nil {
			return nil
		}
		if !strings.Contains(s.logTail(), "Address already in use") {
			return err
		}
	}
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) config() *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	withSession(cfg)
	return cfg
}

// DSN returns the server's go-sql-driver/mysql DSN with no database
// selected: root@tcp(127.0.0.1:port)/ with parseTime=true, loc=UTC and
// time_zone='+00:00'. It stays the same across Stop and Start.
func (s *Server) DSN() string { return s.baseCfg.FormatDSN() }

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.baseCfg.Addr }

// DB creates a fresh database on this server, as the package-level DB does
// on the shared one. The server must be running; the database is dropped
// when the test ends if the server is running then (otherwise it goes with
// the data directory).
func (s *Server) DB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	return newDatabase(t, s.baseCfg.Clone(), func() bool { return !s.Running() }, func(err error) {
		t.Helper()
		t.Fatalf("mariadbtest: private server at %s does not answer: %v", s.Addr(), err)
	})
}

// Running reports whether the server was started and has not been stopped
// or killed since.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Start starts mariadbd on the server's data directory and port and
// returns once it accepts connections, after InnoDB recovery if the server
// was killed. It is an error to Start a running server.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("mariadbtest: server already running")
	}
	logFile, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("mariadbtest: %w", err)
	}
	args := []string{"--no-defaults",
		"--datadir=" + s.dataDir(),
		"--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(s.port),
		"--socket=" + filepath.Join(s.dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(s.dir, "mysqld.pid"),
		"--log-error=" + s.logPath(),
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=64M",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("mariadbtest: start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	s.proc, s.done = cmd, done
	go func() {
		_ = cmd.Wait() // the exit status says nothing the error log does not
		_ = logFile.Close()
		close(done)
	}()

	if err := s.awaitReady(done); err != nil {
		_ = cmd.Process.Kill()
		<-done
		s.proc = nil
		return fmt.Errorf("mariadbtest: %w; error log:\n%s", err, s.logTail())
	}
	return nil
}

// awaitReady pings the server until it answers, it exits, or startTimeout
// passes.
func (s *Server) awaitReady(exited <-chan struct{}) error {
	cfg := s.baseCfg.Clone()
	cfg.Timeout = time.Second
	db, err := open(cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadbd did not accept connections within %v: %w", startTimeout, err)
		}
		select {
		case <-exited:
			return errors.New("mariadbd exited during start")
		case <-tick.C: // no readiness signal to wait on but the port answering
		}
	}
}

// Stop shuts the server down cleanly (SIGTERM) and waits for it to exit,
// killing it after a minute. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	return s.halt(syscall.SIGTERM, stopTimeout)
}

// Kill stops the server like a crash (SIGKILL): nothing is flushed beyond
// what InnoDB already made durable, and the next Start recovers. Killing a
// stopped server does nothing.
func (s *Server) Kill() error {
	return s.halt(os.Kill, stopTimeout)
}

func (s *Server) halt(sig os.Signal, timeout time.Duration) error {
	s.mu.Lock()
	proc, done := s.proc, s.done
	s.mu.Unlock()
	if proc == nil {
		return nil
	}
	if err := proc.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("mariadbtest: signal mariadbd: %w", err)
	}
	select {
	case <-done:
	case <-time.After(timeout):
		_ = proc.Process.Kill()
		<-done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == proc {
		s.proc = nil
	}
	return nil
}

// logTail returns the end of the server's error log.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

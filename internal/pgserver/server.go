package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Shutdown modes for Restart.
const (
	// ImmediateMode stops the server like a crash (SIGQUIT, pg_ctl stop -m
	// immediate): sessions are cut, nothing is checkpointed, and the next
	// start recovers from the WAL.
	ImmediateMode = "immediate"
	// FastMode stops the server cleanly (SIGINT, pg_ctl stop -m fast):
	// sessions are cut, then a shutdown checkpoint is written.
	FastMode = "fast"
)

const (
	// startTimeout bounds the wait for a starting server to accept
	// connections when the context has no earlier deadline.
	startTimeout = time.Minute
	// closeTimeout bounds Close's fast shutdown before it halts postgres.
	closeTimeout = time.Minute
	// startAttempts is how often Start tries another free port when the one
	// it picked was taken before postgres could bind it.
	startAttempts = 3
)

// Server is a PostgreSQL server owned by this process. Its methods are safe
// for concurrent use.
type Server struct {
	dir     string // what Close removes
	dataDir string
	sockDir string
	logPath string
	binDir  string
	owner   *owner // nil: the current user
	args    []string

	port int // set by Start, fixed from then on

	mu     sync.Mutex // serializes starting and stopping
	proc   *process   // nil while stopped
	closed bool
}

// Start creates a cluster with initdb (trust authentication, UTF8, superuser
// postgres) in a new directory under opts.Dir, starts postgres on
// 127.0.0.1 and returns once it accepts connections. Start gives up when ctx
// ends, or when postgres has not accepted connections within a minute. On
// error nothing is left behind; otherwise the caller must Close the Server.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	own, err := lookupOwner()
	if err != nil {
		return nil, err
	}
	parent := opts.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	if parent, err = filepath.Abs(parent); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if err := own.checkReachable(parent); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "pgserver-")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s := &Server{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"),
		binDir:  bin,
		owner:   own,
		args:    settingArgs(opts.Settings),
	}
	if err := s.start(ctx, opts.Port); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

// Port returns the TCP port the server listens on at 127.0.0.1. It never
// changes.
func (s *Server) Port() int { return s.port }

// Dir returns the directory holding the server's files (data directory,
// socket directory, postgres.log), which Close removes.
func (s *Server) Dir() string { return s.dir }

// URL returns a connection URL for database as the superuser postgres,
// which needs no password:
// postgres://postgres@127.0.0.1:<port>/<database>?sslmode=disable.
func (s *Server) URL(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Restart stops the server in mode, ImmediateMode or FastMode, and starts
// it again on the same port, returning once it accepts connections; after
// ImmediateMode that includes crash recovery. Connections open before are
// broken. A stopped server is just started. If ctx ends while stopping or
// starting, postgres is halted: shut down immediately, or killed. A server
// that fails to start stays stopped, and Restart may be tried again.
func (s *Server) Restart(ctx context.Context, mode string) error {
	var sig syscall.Signal
	switch mode {
	case ImmediateMode:
		sig = syscall.SIGQUIT
	case FastMode:
		sig = syscall.SIGINT
	default:
		return fmt.Errorf("pgserver: restart mode %q is neither %q nor %q", mode, ImmediateMode, FastMode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.stop(ctx, sig); err != nil {
		return err
	}
	return s.launch(ctx)
}

// Stop shuts the server down in FastMode and waits for postgres to exit. It
// is idempotent; Restart starts a stopped server again. If ctx ends first,
// Stop halts postgres (immediate shutdown, or SIGKILL if that hangs) and
// returns ctx's error.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop(ctx, syscall.SIGINT)
}

// Close stops the server (FastMode, halting postgres after a minute) and
// removes Dir. It is idempotent; Restart fails with ErrClosed afterwards.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	err := s.stop(ctx, syscall.SIGINT)
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("pgserver: remove %s: %w", s.dir, rmErr))
	}
	return err
}

// LogTail returns the last n lines of the server's log (initdb's output,
// then postgres's), for test failure messages. It returns "" once the
// server is closed.
func (s *Server) LogTail(n int) string {
	const maxRead = 256 << 10 // enough for any sensible n
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	offset := max(fi.Size()-maxRead, 0)
	buf, err := io.ReadAll(io.NewSectionReader(f, offset, fi.Size()-offset))
	if err != nil {
		return ""
	}
	return tail(string(buf), n)
}

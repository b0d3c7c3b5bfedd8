package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// start lays out the directory, runs initdb and starts postgres, on port or,
// when port is 0, on a free one.
func (s *Server) start(ctx context.Context, port int) error {
	// A socket path is limited to 107 bytes on Linux.
	if n := len(s.sockDir) + len("/.s.PGSQL.65535"); n > 107 {
		return fmt.Errorf("pgserver: the socket path in %s would be %d bytes, over the limit of 107: choose a shorter Options.Dir", s.sockDir, n)
	}
	if err := os.Mkdir(s.sockDir, 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: create log: %w", err)
	}
	defer logFile.Close()
	if err := s.owner.chown(s.dir, s.sockDir, s.logPath); err != nil {
		return err
	}
	if port != 0 {
		if err := checkFree(port); err != nil { // before initdb's seconds
			return err
		}
	}
	if err := s.initdb(ctx, logFile); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		s.port = port
		if port == 0 {
			if s.port, err = freePort(); err != nil {
				return err
			}
		}
		err = s.launch(ctx)
		if err == nil || port != 0 || attempt == startAttempts || !errors.Is(err, errPortTaken) {
			return err
		}
	}
}

// initdb creates the cluster, copying initdb's output to the log.
func (s *Server) initdb(ctx context.Context, logFile *os.File) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, "initdb"),
		"--pgdata", s.dataDir,
		"--username", "postgres",
		"--auth", "trust",
		"--encoding", "UTF8",
		"--no-locale",
		"--no-sync", // the cluster is disposable
	)
	var out strings.Builder
	cmd.Stdout = io.MultiWriter(&out, logFile)
	cmd.Stderr = cmd.Stdout
	if err := s.prepare(cmd); err != nil {
		return err
	}
	if err := cmd.Run(); err != nil {
		return withOutput(fmt.Errorf("pgserver: initdb %s: %w", s.dataDir, err), "initdb output", out.String())
	}
	return nil
}

// prepare makes cmd run as the owner, in the server's directory, with a
// clean environment.
func (s *Server) prepare(cmd *exec.Cmd) error {
	attr, err := s.owner.sysProcAttr()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = attr
	cmd.Dir = s.dir // the test's working directory may be closed to the owner
	cmd.Env = childEnv()
	return nil
}

// checkFree reports errPortTaken unless port is free on 127.0.0.1.
func checkFree(port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pgserver: %s: %w (%w)", addr, errPortTaken, err)
	}
	return l.Close()
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

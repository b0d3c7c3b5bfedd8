package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pollInterval is how often a starting server is asked whether it accepts
// connections: postgres offers nothing to wait on.
const pollInterval = 20 * time.Millisecond

// process is one run of the postmaster.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the postmaster has exited; err is set then
	err    error         // cmd.Wait's result
}

// launch starts postgres on s.port and waits until it accepts connections.
// The caller holds s.mu.
func (s *Server) launch(ctx context.Context) error {
	// Fail fast, and never connect to another server by mistake.
	if err := checkFree(s.port); err != nil {
		return err
	}

	p, err := s.spawn()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := s.awaitReady(ctx, p); err != nil {
		p.halt()
		if strings.Contains(s.LogTail(logLines), "Address already in use") {
			err = fmt.Errorf("%w (%w)", err, errPortTaken)
		}
		return withOutput(fmt.Errorf("pgserver: start postgres on 127.0.0.1:%d: %w", s.port, err), "postgres log", s.LogTail(logLines))
	}
	s.proc = p
	return nil
}

// spawn starts the postmaster with its output appended to the log.
func (s *Server) spawn() (*process, error) {
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("pgserver: open log: %w", err)
	}
	defer logFile.Close() // postgres has its own descriptor
	fmt.Fprintf(logFile, "pgserver: starting postgres on 127.0.0.1:%d\n", s.port)

	args := append([]string{
		"-D", s.dataDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(s.port),
		"-c", "unix_socket_directories=" + s.sockDir,
	}, s.args...)
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := s.prepare(cmd); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgserver: run postgres: %w", err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// haltGrace is how long halt lets an immediate shutdown take.
const haltGrace = 5 * time.Second

// halt ends the postmaster however it is doing: an immediate shutdown, which
// takes its child processes down too, or SIGKILL if that hangs. It returns
// once the postmaster has exited.
func (p *process) halt() {
	_ = p.cmd.Process.Signal(syscall.SIGQUIT) // fails only if it has exited
	timer := time.NewTimer(haltGrace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// awaitReady polls until the server accepts a connection and turns out to
// be this one, p exits, or ctx ends.
func (s *Server) awaitReady(ctx context.Context, p *process) error {
	cfg, err := pgx.ParseConfig(s.URL("postgres"))
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = time.Second
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		err := s.ping(ctx, cfg)
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("postgres exited: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections: %w (last attempt: %v)", ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

// ping connects once and checks the server's data directory is s.dataDir.
func (s *Server) ping(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dataDir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir); err != nil {
		return err
	}
	if !sameFile(dataDir, s.dataDir) {
		return fmt.Errorf("the server answering is not this one: its data directory is %s", dataDir)
	}
	return nil
}

// sameFile reports whether paths a and b name the same existing file.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// stop signals postgres (SIGINT: fast shutdown, SIGQUIT: immediate) and
// waits for it to exit, killing it if ctx ends first. The caller holds s.mu.
func (s *Server) stop(ctx context.Context, sig syscall.Signal) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	_ = p.cmd.Process.Signal(sig) // fails only if it has exited already
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.halt()
		return fmt.Errorf("pgserver: stop postgres: %w; halted it", ctx.Err())
	}
	if sig == syscall.SIGINT && p.err != nil {
		return withOutput(fmt.Errorf("pgserver: stop postgres: %w", p.err), "postgres log", s.LogTail(logLines))
	}
	return nil
}

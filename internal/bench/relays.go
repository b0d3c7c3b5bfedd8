package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Bounds of the relays' lifecycle. A relay given SIGTERM finishes or
// releases its batch within its --shutdown-timeout (10s by default).
const (
	relayStartTimeout = 30 * time.Second
	relayStopTimeout  = 20 * time.Second
)

// observeFD is where a relay writes its observer events (--observe-file):
// its file descriptor 3, the write end of a pipe whose read end the
// harness reads.
const observeFD = "/dev/fd/3"

// relayProc is one `relay run` child process.
type relayProc struct {
	id      string
	appName string // its connections' application_name
	cmd     *exec.Cmd
	log     *relayLog     // its standard error: warnings
	events  *relayEvents  // its observer events: what it did
	done    chan struct{} // closed once it exited and its stderr and events are read
	err     error         // cmd.Wait's, valid once done is closed
}

// relaySet is the relays of one run.
type relaySet struct {
	procs []*relayProc
}

// relayEnv is the environment of a relay: the harness's minus every
// OUTBOX_* variable (which would change the relay's configuration) and
// PGAPPNAME, plus the database URL (kept off the command line, where ps
// shows it), the application_name that tells its connections apart, and
// the sink's variables (sink.relayEnv).
func relayEnv(databaseURL, appName string, sinkEnv []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_") && !strings.HasPrefix(kv, "PGAPPNAME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "OUTBOX_DATABASE_URL="+databaseURL, "PGAPPNAME="+appName)
	return append(env, sinkEnv...)
}

// relayArgs are the flags of one relay: --sink, its observer events to
// observeFD, JSON logs (for the warnings), in soak mode the retention
// janitor's settings, then cfg.RelayArgs. The sink's own flags are in
// its environment (relayEnv).
func relayArgs(cfg Config, id string) []string {
	args := []string{"run", "--schema", cfg.Schema, "--table", "outbox", "--sink", cfg.Sink,
		"--batch-size", fmt.Sprint(cfg.BatchSize),
		"--poll-interval", cfg.PollInterval.String(),
		"--relay-id", id,
		"--observe-file", observeFD,
		"--log-format", "json",
	}
	if cfg.Mode == ModeSoak {
		args = append(args,
			"--retention", cfg.Retention.String(),
			"--janitor-interval", cfg.JanitorInterval.String(),
			"--janitor-batch", fmt.Sprint(cfg.JanitorBatch))
	}
	if cfg.NoNotify {
		args = append(args, "--listen=false")
	}
	return append(args, cfg.RelayArgs...)
}

// startRelays starts n relays. They are not ready yet: see awaitReady.
func startRelays(cfg Config, snk *sink, n int) (*relaySet, error) {
	s := &relaySet{}
	for i := range n {
		id := fmt.Sprintf("bench-r%d", i+1)
		p, err := startRelay(cfg, snk, id)
		if err != nil {
			s.kill()
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	return s, nil
}

func startRelay(cfg Config, s *sink, id string) (*relayProc, error) {
	p := &relayProc{
		id:      id,
		appName: fmt.Sprintf("relay-bench %s %s", cfg.Schema, id),
		log:     newRelayLog(),
		events:  newRelayEvents(),
		done:    make(chan struct{}),
	}
	p.cmd = exec.Command(cfg.RelayBinary, relayArgs(cfg, id)...)
	p.cmd.Env = relayEnv(cfg.DatabaseURL, p.appName, s.relayEnv())
	p.cmd.SysProcAttr = procAttr()
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("relay %s: %w", id, err)
	}
	events, eventsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("relay %s: observe pipe: %w", id, err)
	}
	p.cmd.ExtraFiles = []*os.File{eventsW} // observeFD
	err = p.cmd.Start()
	eventsW.Close() // the child has its own: the pipe ends when the relay exits
	if err != nil {
		events.Close()
		return nil, fmt.Errorf("start relay %s (%s): %w", id, cfg.RelayBinary, err)
	}
	eventsRead := make(chan struct{})
	go func() {
		p.events.consume(events)
		events.Close()
		close(eventsRead)
	}()
	go func() {
		p.log.consume(stderr) // until the process closes stderr
		p.err = p.cmd.Wait()
		<-eventsRead
		close(p.done)
	}()
	return p, nil
}

// awaitReady waits until every relay wrote its started line: its first
// claim ran.
func (s *relaySet) awaitReady(ctx context.Context) error {
	timeout := time.NewTimer(relayStartTimeout)
	defer timeout.Stop()
	for _, p := range s.procs {
		select {
		case <-p.events.started:
		case <-p.done:
			return fmt.Errorf("relay %s exited before it started (%v):\n%s", p.id, p.err, p.log.lastLines())
		case <-timeout.C:
			return fmt.Errorf("relay %s did not start within %v:\n%s", p.id, relayStartTimeout, p.log.lastLines())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// exited returns an error naming the first relay that exited, or nil
// while all run.
func (s *relaySet) exited() error {
	for _, p := range s.procs {
		select {
		case <-p.done:
			return fmt.Errorf("relay %s exited during the run (%v):\n%s", p.id, p.err, p.log.lastLines())
		default:
		}
	}
	return nil
}

// events returns the relays' events, which stay readable after stop.
func (s *relaySet) events() []*relayEvents {
	out := make([]*relayEvents, len(s.procs))
	for i, p := range s.procs {
		out[i] = p.events
	}
	return out
}

// appNames returns the application_name of every relay's connections.
func (s *relaySet) appNames() []string {
	names := make([]string, len(s.procs))
	for i, p := range s.procs {
		names[i] = p.appName
	}
	return names
}

// relayUsage is what the relays' processes used, from their rusage.
type relayUsage struct {
	cpuSeconds float64
	peakRSS    int64 // bytes, the largest of the relays
	perRelay   []RelayUsage
	events     eventStats
	// warnings counts the relays' WARN and ERROR log lines by message, and
	// the events the harness did not get (see relayEvents.addWarnings).
	warnings map[string]int
}

// stop sends SIGTERM to every relay, waits for them to exit (killing those
// that outlast relayStopTimeout) and returns their resource usage. The
// error reports relays that did not exit cleanly.
func (s *relaySet) stop(batchSize int) (relayUsage, error) {
	// The peak resident set from /proc, read while the relays live, is
	// their own; rusage's would include the harness's (see peakRSS).
	hwm := make([]int64, len(s.procs))
	for i, p := range s.procs {
		if b, ok := procPeakRSS(p.cmd.Process.Pid); ok {
			hwm[i] = b
		}
	}
	for _, p := range s.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only if it already exited
	}
	var errs []error
	expired := make(chan struct{})
	t := time.AfterFunc(relayStopTimeout, func() { close(expired) })
	defer t.Stop()
	var u relayUsage
	for i, p := range s.procs {
		select {
		case <-p.done:
		case <-expired:
			_ = p.cmd.Process.Kill()
			<-p.done
			errs = append(errs, fmt.Errorf("relay %s did not stop within %v after SIGTERM", p.id, relayStopTimeout))
		}
		if p.err != nil {
			errs = append(errs, fmt.Errorf("relay %s: %w:\n%s", p.id, p.err, p.log.lastLines()))
		}
		ps := p.cmd.ProcessState
		rss := hwm[i]
		if rss == 0 {
			rss = peakRSS(ps)
		}
		one := RelayUsage{ID: p.id, CPUSeconds: (ps.UserTime() + ps.SystemTime()).Seconds(), PeakRSSMB: float64(rss) / (1 << 20)}
		one.Batches, one.Claimed = p.events.batchCount()
		u.perRelay = append(u.perRelay, one)
		u.cpuSeconds += one.CPUSeconds
		u.peakRSS = max(u.peakRSS, rss)
		u.events.collect(p.events, batchSize)
		u.warnings = p.events.addWarnings(p.log.addWarnings(u.warnings))
	}
	return u, errors.Join(errs...)
}

// kill ends every relay at once, for error paths.
func (s *relaySet) kill() {
	for _, p := range s.procs {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

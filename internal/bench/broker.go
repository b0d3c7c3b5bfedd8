package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/sinks"
)

// BrokerCommand is the subcommand of relay-bench that serves a sink's
// embedded broker: `relay-bench broker --sink kafka`.
const BrokerCommand = "broker"

const brokerStartTimeout = 30 * time.Second

// ServeBroker is `relay-bench broker`: it starts the embedded broker of
// the sink named sink (sinks.Embedder), writes to w one line, the JSON
// array of the sink's flags that point at it (["--kafka-brokers=..."]),
// and serves until ctx ends. Run starts it as its own process so that the
// broker's CPU does not count as the harness's or the relays'.
func ServeBroker(ctx context.Context, w io.Writer, sink string) error {
	sk, ok := sinks.Named(sink)
	if !ok {
		return fmt.Errorf("bench broker: no sink %q", sink)
	}
	settings, fs, err := sk.Parse()
	if err != nil {
		return fmt.Errorf("bench broker: %w", err)
	}
	e, ok := settings.(sinks.Embedder)
	if !ok {
		return fmt.Errorf("bench broker: the %s sink has no embedded broker", sink)
	}
	stop, err := e.Embed()
	if err != nil {
		return err
	}
	defer stop()
	line, err := json.Marshal(sinks.Args(fs))
	if err == nil {
		_, err = fmt.Fprintf(w, "%s\n", line)
	}
	if err != nil {
		return fmt.Errorf("bench broker: write its flags: %w", err)
	}
	<-ctx.Done()
	return nil
}

// brokerProc is the `relay-bench broker` child process.
type brokerProc struct {
	cmd    *exec.Cmd
	args   []string // the sink's flags that point at the broker
	stderr *syncBuffer
	done   chan struct{}
	err    error // valid once done is closed
}

// startBroker starts `bin broker --sink sink` and returns once it
// printed the sink's flags.
func startBroker(ctx context.Context, bin, sink string) (*brokerProc, error) {
	b := &brokerProc{stderr: &syncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command(bin, BrokerCommand, "--sink", sink)
	b.cmd.Stderr = b.stderr
	b.cmd.SysProcAttr = procAttr()
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench broker: %w", err)
	}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start bench broker (%s): %w", bin, err)
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r) // until the process closes stdout
		b.err = b.cmd.Wait()
		close(b.done)
	}()
	timeout := time.NewTimer(brokerStartTimeout)
	defer timeout.Stop()
	select {
	case line := <-lines:
		if line == "" {
			<-b.done
			return nil, fmt.Errorf("bench broker exited (%v): %s", b.err, b.stderr.String())
		}
		if err = json.Unmarshal([]byte(line), &b.args); err == nil {
			return b, nil
		}
		err = fmt.Errorf("bench broker printed %q: %w", line, err)
	case <-timeout.C:
		err = fmt.Errorf("bench broker printed no flags within %v: %s", brokerStartTimeout, b.stderr.String())
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = b.cmd.Process.Kill()
	<-b.done
	return nil, err
}

// cpu returns the broker's CPU seconds so far, where /proc tells.
func (b *brokerProc) cpu() (float64, bool) { return procCPU(b.cmd.Process.Pid) }

// stop ends the broker with SIGTERM (SIGKILL after 10s).
func (b *brokerProc) stop() error {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	if b.err != nil {
		return fmt.Errorf("bench broker: %w: %s", b.err, b.stderr.String())
	}
	return nil
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf.Len() > 64<<10 {
		return len(p), nil // enough for an error message
	}
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Package emulators starts the cloud services' local emulators that the
// sinks' tests, relay demo and the fault harness publish to: Node.js
// programs under scripts/emulators, installed from the npm registry with
// `npm ci --prefix scripts/emulators`. Each script listens on 127.0.0.1,
// prints "listening PORT" once it accepts connections, and exits when its
// standard input closes, so that it never outlives the process that
// started it.
package emulators

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Emulator is a running emulator.
type Emulator struct {
	// Endpoint is its base URL, http://127.0.0.1:PORT.
	Endpoint string
	cmd      *exec.Cmd
	stdin    io.Closer
	done     chan struct{}
	kill     bool // stopped by SIGTERM rather than by closing its input
}

// Start runs scripts/emulators/<name>.mjs on a free port and returns once
// it listens. The folder is OUTBOX_EMULATORS_DIR, or found by walking up
// from the working directory (a checkout of the project).
func Start(name string) (*Emulator, error) {
	dir, err := folder()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		return nil, fmt.Errorf("emulators: %s is not installed; run: npm ci --prefix %s", name, dir)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("emulators: %s needs Node.js (sudo apt-get install -y nodejs npm): %w", name, err)
	}
	cmd := exec.Command(node, filepath.Join(dir, name+".mjs"), "0")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulators: start %s: %w", name, err)
	}
	e := &Emulator{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	lines := bufio.NewScanner(stdout)
	if lines.Scan() {
		if port, ok := strings.CutPrefix(lines.Text(), "listening "); ok {
			e.Endpoint = "http://127.0.0.1:" + port
		}
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdout) // until it exits
		_ = cmd.Wait()
		close(e.done)
	}()
	if e.Endpoint == "" {
		e.Close()
		return nil, fmt.Errorf("emulators: %s did not say where it listens", name)
	}
	return e, nil
}

// Close stops the emulator and waits for it to exit (killing it after 5 s).
func (e *Emulator) Close() {
	_ = e.stdin.Close()
	if e.kill {
		_ = e.cmd.Process.Signal(os.Interrupt)
	}
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.done
	}
}

// folder returns the folder of the emulators' scripts.
func folder() (string, error) {
	if dir := os.Getenv("OUTBOX_EMULATORS_DIR"); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		candidate := filepath.Join(dir, "scripts", "emulators")
		if _, err := os.Stat(filepath.Join(candidate, "package.json")); err == nil {
			return candidate, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("emulators: no scripts/emulators above the working directory; run from a checkout of the project or set OUTBOX_EMULATORS_DIR")
		}
		dir = parent
	}
}

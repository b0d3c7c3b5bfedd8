package emulators

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Mosquitto starts a private Mosquitto (Debian's mosquitto package) on a
// free 127.0.0.1 port, keeping nothing on disk and queueing without limit
// (max_queued_messages 0), so that a subscriber that falls behind loses
// nothing. Its Endpoint is mqtt://127.0.0.1:PORT.
func Mosquitto() (*Emulator, error) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		return nil, fmt.Errorf("emulators: mosquitto is not installed (sudo apt-get install -y mosquitto): %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir, err := os.MkdirTemp("", "outbox-mosquitto-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	text := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 0\nmax_inflight_messages 0\nlog_type error\nlog_type warning\nset_tcp_nodelay true\n", port)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // unused: Close kills it
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulators: start mosquitto: %w", err)
	}
	e := &Emulator{Endpoint: fmt.Sprintf("mqtt://127.0.0.1:%d", port), cmd: cmd, stdin: stdin, done: make(chan struct{}), kill: true}
	go func() {
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
		close(e.done)
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return e, nil
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("emulators: mosquitto exited at start (port %d taken?)", port)
		case <-time.After(20 * time.Millisecond): // poll until it listens
		}
		if time.Now().After(deadline) {
			e.Close()
			return nil, fmt.Errorf("emulators: mosquitto does not listen on %s", addr)
		}
	}
}

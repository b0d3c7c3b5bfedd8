package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/testdb"
	"github.com/outboxrelay/outboxrelay/outbox"
)

// The built binary, sent SIGTERM while it serves, stops claiming, finishes
// and exits 0, leaving no row in processing.
func TestSIGTERMStopsTheBinaryGracefully(t *testing.T) {
	t.Parallel()
	pool, table := testdb.New(t)
	bin := buildBinary(t)
	ctx := context.Background()
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, 500)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "signal.test", Payload: fmt.Appendf(nil, "event %d", i)}
	}
	if _, err := w.WriteBatch(ctx, pool, msgs); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "run", "--sink", "stdout", "--batch-size", "10", "--poll-interval", "10ms", "--log-format", "json")
	cmd.Env = append(os.Environ(), "OUTBOX_DATABASE_URL="+testdb.URL(t), "OUTBOX_SCHEMA="+table.Schema)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Signal once the relay is demonstrably publishing.
	lines := bufio.NewScanner(stdout)
	for i := 0; i < 20 && lines.Scan(); i++ {
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() {
		for lines.Scan() { // drain, so the relay never blocks on a full pipe
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay exited with %v after SIGTERM; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("relay did not exit within 30s of SIGTERM; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"relay stopped"`) {
		t.Errorf("no stop log:\n%s", stderr.String())
	}
	var processing, sent int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 'processing'), count(*) FILTER (WHERE status = 'sent') FROM "+table.Ident()).Scan(&processing, &sent); err != nil {
		t.Fatal(err)
	}
	if processing != 0 || sent == 0 {
		t.Errorf("after SIGTERM: %d rows processing, %d sent; want 0 processing and some sent", processing, sent)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildBinary builds the relay binary once per test run and returns its
// path. The build records the VCS revision (-buildvcs=auto overrides a
// GOFLAGS=-buildvcs=false), as make build does.
func buildBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relay-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "relay")
		if out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

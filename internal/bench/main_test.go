package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// relayBin and benchBin are the binaries TestMain builds: the relays of
// the tests are relayBin's processes, the embedded broker benchBin's.
var relayBin, benchBin string

// TestMain builds relay and relay-bench into a temporary directory, runs the
// tests, removes the directory and then fails the run if goroutines of
// kafka-go or pgx outlived the tests.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outbox-bench-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relayBin, benchBin = filepath.Join(dir, "relay"), filepath.Join(dir, "relay-bench")
	code := 1
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
		"github.com/outboxrelay/outboxrelay/cmd/relay", "github.com/outboxrelay/outboxrelay/cmd/relay-bench")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build relay and relay-bench: %v\n%s", err, out)
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(dir)
	if code == 0 {
		if leaked := awaitNoLeaks(10 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakMarkers mark goroutines that must be gone once the tests are over:
// Run closes its pools and the kafka-go transports of its consumers. (The
// same check as internal/leakcheck, which offers no way to run code
// between the tests and the check.)
var leakMarkers = []string{"github.com/segmentio/kafka-go", "github.com/jackc/pgx/v5/pgxpool.", "github.com/jackc/puddle/"}

// awaitNoLeaks waits until no goroutine matches leakMarkers and returns
// the stacks of those that still do at timeout.
func awaitNoLeaks(timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, marker := range leakMarkers {
				if strings.Contains(g, marker) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond) // polling the runtime; nothing to wait on
	}
}

package integration

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// leakMarkers name the code whose goroutines must be gone once every test
// has cleaned up: relays (Run, heartbeats, publish watchers), kafka-go
// writers and connections, pgx pools, and the kfake brokers the Kafka tests
// start. Goroutines of the runtime and the testing package never match.
var leakMarkers = []string{
	"github.com/outboxrelay/outboxrelay/relay.",
	"github.com/segmentio/kafka-go",
	"github.com/jackc/pgx/v5/pgxpool.",
	"github.com/jackc/puddle/",
	"github.com/twmb/franz-go/pkg/kfake",
}

// TestMain fails the run when goroutines of the relay, kafka-go, pgx pools
// or kfake outlive the tests: a stopped Relay, a closed Publisher, pool or
// broker must leave nothing running.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := awaitNoGoroutines(5*time.Second, leakMarkers...); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// awaitNoGoroutines waits until no goroutine's stack mentions any of the
// markers, and returns the offending stacks if that does not happen before
// timeout: goroutines that are winding down get a moment to finish.
func awaitNoGoroutines(timeout time.Duration, markers ...string) string {
	deadline := time.Now().Add(timeout)
	for {
		leaked := goroutinesMatching(markers)
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond) // polling the runtime; nothing to wait on
	}
}

// goroutinesMatching returns the stacks of all goroutines that mention any
// of the markers.
func goroutinesMatching(markers []string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf)) // truncated: a goroutine could hide in the cut
	}
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, marker := range markers {
			if strings.Contains(g, marker) {
				leaked = append(leaked, g)
				break
			}
		}
	}
	return leaked
}

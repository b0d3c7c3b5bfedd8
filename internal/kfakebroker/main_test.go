package kfakebroker_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run when goroutines of kfake or kafka-go outlive the
// tests: a closed Broker must leave nothing running.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := awaitNoGoroutines(10*time.Second, "segmentio/kafka-go", "franz-go/pkg/kfake"); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// awaitNoGoroutines waits until no goroutine's stack mentions any of the
// markers, and returns the offending stacks if that does not happen in time.
func awaitNoGoroutines(timeout time.Duration, markers ...string) string {
	deadline := time.Now().Add(timeout)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, marker := range markers {
				if strings.Contains(g, marker) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond) // polling the runtime; nothing to wait on
	}
}

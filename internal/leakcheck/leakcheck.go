// Package leakcheck fails a test binary whose goroutines outlive its tests:
// a stopped Relay, a closed Publisher, pool or broker must leave nothing
// running. Use it from TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m, leakcheck.KafkaGo, leakcheck.KFake) }
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Markers: a goroutine whose stack mentions one is a leak once the tests
// are over. Goroutines of the runtime and the testing package never match.
const (
	Relay   = "github.com/outboxrelay/outboxrelay/relay."
	KafkaGo = "github.com/segmentio/kafka-go"
	PgxPool = "github.com/jackc/pgx/v5/pgxpool."
	Puddle  = "github.com/jackc/puddle/"
	KFake   = "github.com/twmb/franz-go/pkg/kfake"
	// GRPCClient marks a gRPC client connection's goroutines (the Pub/Sub
	// client's): its transports, resolver and balancer.
	GRPCClient = "google.golang.org/grpc/internal/transport.(*http2Client)"
	// GRPCSerializer marks the callback goroutine each gRPC client
	// connection keeps until it is closed.
	GRPCSerializer = "google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer)"
	// PStest marks the Pub/Sub fake's server goroutines (pstest).
	PStest = "cloud.google.com/go/internal/testutil.(*Server)"
)

// Main runs the tests and, when they pass, waits up to 10 seconds for the
// goroutines matching markers to finish; it exits 1 listing those that
// remain.
func Main(m *testing.M, markers ...string) {
	code := m.Run()
	if code == 0 {
		if leaked := await(10*time.Second, markers); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests:\n\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// await waits until no goroutine matches and returns the stacks of those
// that still do at timeout.
func await(timeout time.Duration, markers []string) string {
	deadline := time.Now().Add(timeout)
	for {
		leaked := matching(markers)
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond) // polling the runtime; nothing to wait on
	}
}

// matching returns the stacks of all goroutines that mention a marker.
func matching(markers []string) []string {
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

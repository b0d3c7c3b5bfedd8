package pubsubsink_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A closed Publisher, and the tests' own clients and fakes, must leave no
// gRPC goroutine running (the client's publish scheduler ends once
// flushed).
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.GRPCClient, leakcheck.GRPCSerializer, leakcheck.PStest)
}

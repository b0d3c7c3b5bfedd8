package natssink_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A closed Publisher, and the tests' own connections, must leave no
// nats.go goroutine running.
func TestMain(m *testing.M) { leakcheck.Main(m, "github.com/nats-io/nats.go") }

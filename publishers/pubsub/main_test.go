package pubsubsink_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A closed Publisher must leave no goroutine of the Pub/Sub client
// running (its publish scheduler and bundlers).
func TestMain(m *testing.M) {
	leakcheck.Main(m, "cloud.google.com/go/pubsub/v2.(*Publisher)", "cloud.google.com/go/pubsub/v2/internal/scheduler")
}

package webhook_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A stopped relay and a closed sink must leave nothing running.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Relay, "github.com/outboxrelay/outboxrelay/publishers/webhook.", "net/http.(*persistConn)")
}

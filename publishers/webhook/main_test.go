package webhook_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A closed Publisher must leave no request, and no pooled connection,
// behind.
func TestMain(m *testing.M) {
	leakcheck.Main(m, "github.com/outboxrelay/outboxrelay/publishers/webhook.", "net/http.(*persistConn)")
}

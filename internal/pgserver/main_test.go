package pgserver_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A closed Server must leave no goroutine waiting on postgres, and no pgx
// connection behind.
func TestMain(m *testing.M) {
	leakcheck.Main(m, "github.com/outboxrelay/outboxrelay/internal/pgserver.", "github.com/jackc/pgx/v5")
}

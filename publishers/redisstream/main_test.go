package redisstream_test

import (
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
	"github.com/outboxrelay/outboxrelay/publishers/redisstream"
)

// publisherstestTimeout bounds the tests' own calls to Redis.
const publisherstestTimeout = 10 * time.Second

// A closed Publisher must leave no go-redis goroutine, and no goroutine of
// this package, running.
func TestMain(m *testing.M) {
	redisstream.SetClientLogger(nil) // go-redis' lines about refused dials, which tests cause on purpose
	leakcheck.Main(m, "github.com/redis/go-redis/", "github.com/outboxrelay/outboxrelay/publishers/redisstream.")
}

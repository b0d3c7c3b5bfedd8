package integration

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A stopped Relay, a closed Publisher, pool or broker must leave nothing
// running: relays (Run, heartbeats, publish watchers), kafka-go writers and
// connections, pgx pools and kfake brokers.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Relay, leakcheck.KafkaGo, leakcheck.PgxPool, leakcheck.Puddle, leakcheck.KFake)
}

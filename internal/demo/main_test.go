package demo

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// Every run stops its relays, closes its publishers and its Sink: nothing
// of theirs may outlive the tests.
func TestMain(m *testing.M) {
	leakcheck.Main(m, leakcheck.Relay, leakcheck.KafkaGo, leakcheck.KFake, leakcheck.PgxPool,
		"github.com/nats-io/nats.go", "github.com/rabbitmq/amqp091-go", "github.com/redis/go-redis/",
		"github.com/outboxrelay/outboxrelay/internal/demo.(*", "github.com/outboxrelay/outboxrelay/publishers/")
}

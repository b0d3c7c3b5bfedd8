package rabbitmq_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A closed Publisher must leave no amqp091-go goroutine, nor one of its
// own (a channel closing in the background), running.
func TestMain(m *testing.M) {
	leakcheck.Main(m, "github.com/rabbitmq/amqp091-go", "github.com/outboxrelay/outboxrelay/publishers/rabbitmq.")
}

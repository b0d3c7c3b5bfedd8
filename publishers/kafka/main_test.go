package kafka_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A closed Publisher must leave no kafka-go or kfake goroutine running.
func TestMain(m *testing.M) { leakcheck.Main(m, leakcheck.KafkaGo, leakcheck.KFake) }

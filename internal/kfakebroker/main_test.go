package kfakebroker_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// A closed Broker must leave no kfake or kafka-go goroutine running.
func TestMain(m *testing.M) { leakcheck.Main(m, leakcheck.KafkaGo, leakcheck.KFake) }

package faultproxy_test

import (
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/leakcheck"
)

// proxyGoroutine marks a goroutine of the package under test (not of its
// tests, TestMain included): a closed Proxy must leave none running.
const proxyGoroutine = "github.com/outboxrelay/outboxrelay/internal/faultproxy."

func TestMain(m *testing.M) { leakcheck.Main(m, proxyGoroutine) }

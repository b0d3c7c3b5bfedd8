package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/outboxrelay/outboxrelay/internal/faultproxy"
	"github.com/outboxrelay/outboxrelay/internal/history"
)

// sink is the destination the relays publish to, as the harness sees it:
// it starts or prepares the broker behind a fault proxy, tells the relays
// how to reach it through that proxy, and reads back, with the broker's
// own client, every record the relays delivered. The relays publish with
// the real sink of `relay run --sink`; a sink only prepares and reads.
type sink interface {
	// start creates the destination of the run's topics and the fault
	// proxy in front of the broker, registering their removal with
	// t.Cleanup. It returns the proxy the broker faults act on.
	start(ctx context.Context, t *testing.T) *faultproxy.Proxy
	// topics are the run's ordered and plain topics.
	topics() (ordered, plain string)
	// kinds are the fault kinds the sink runs: every kind, or every kind
	// but broker-errors where the broker cannot refuse a share of
	// publishes.
	kinds() []string
	// relayArgs are the flags and environment variables that make a relay
	// publish to the sink through its proxy.
	relayArgs() (args, env []string)
	// where describes the broker, for the log.
	where() string
	// refuse makes the broker refuse the given share of publishes with a
	// retriable error, or none with nil (broker-errors; called only when
	// kinds has it); refused counts the publishes refused so far.
	refuse(share *float64)
	refused() int64
	// read returns every record delivered, once the relays have stopped:
	// event id, topic, key, payload, and the record's position in its
	// destination (Partition, Offset: a key's records in the order the
	// destination keeps them) and time.
	read(ctx context.Context, t *testing.T) []record
}

// record is one record a sink read back: what the checker compares, and
// the payload it carried, which the harness compares with the one written.
type record struct {
	history.Delivery
	payload string
}

// sinkNames are the values of OUTBOX_CHAOS_SINK; kafka is the default.
var sinkNames = []string{"kafka", "nats", "rabbitmq", "redis", "webhook"}

// sinkFromEnv returns the sink OUTBOX_CHAOS_SINK names; seed drives its
// random choices.
func sinkFromEnv(seed uint64) (string, sink, error) {
	name := os.Getenv("OUTBOX_CHAOS_SINK")
	if name == "" {
		name = "kafka"
	}
	switch name {
	case "kafka":
		return name, &kafkaSink{seed: seed}, nil
	case "nats", "redis":
		return name, newRegistrySink(name), nil
	case "rabbitmq":
		return name, newRabbitMQSink(), nil
	case "webhook":
		return name, newWebhookSink(seed), nil
	}
	return name, nil, fmt.Errorf("OUTBOX_CHAOS_SINK=%q: want one of %v", name, sinkNames)
}

// runTopics returns the ordered and plain topics with a suffix unique to
// the run (".r" and 8 hex digits): a shared broker that keeps what earlier
// runs published then gives each run destinations of its own. The suffix
// does not come from the seed, so a replay gets fresh destinations too.
func runTopics() (ordered, plain string) {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails
	suffix := ".r" + hex.EncodeToString(b[:])
	return orderedTopic + suffix, plainTopic + suffix
}

// kindsWithoutErrors is every fault kind but broker-errors, for the sinks
// whose broker cannot be made to refuse a share of publishes.
func kindsWithoutErrors() []string {
	return slices.DeleteFunc(slices.Clone(allKinds), func(k string) bool { return k == brokerErrors })
}

// envOr returns the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

package bench

import (
	"context"
	"strings"
)

// kafkaSink is the Kafka sink: topics with Config.Partitions partitions on
// the brokers, read back with kafka-go (kafka.go). It has no sink
// ceiling: the Kafka runs compare with the SQL ceiling only, as before.
type kafkaSink struct {
	brokers    []string
	partitions int
}

func (k *kafkaSink) relayArgs() []string {
	return kafkaRelayArgs(k.brokers)
}

// kafkaRelayArgs are the relays' sink flags for brokers.
func kafkaRelayArgs(brokers []string) []string {
	return []string{"--sink", "kafka", "--kafka-brokers", strings.Join(brokers, ",")}
}

func (k *kafkaSink) relayEnv() []string { return nil }

func (k *kafkaSink) prepare(ctx context.Context, topic string) error {
	return createTopic(ctx, k.brokers, topic, k.partitions)
}

func (k *kafkaSink) cleanup(ctx context.Context, topic string) error {
	return deleteTopic(ctx, k.brokers, topic)
}

func (k *kafkaSink) read(ctx context.Context, topic string, follow bool, a *arrivals, ready func()) error {
	return readTopic(ctx, k.brokers, topic, follow, a, ready)
}

func (k *kafkaSink) settings(*Settings) {} // Brokers and EmbeddedBroker, as before

func (k *kafkaSink) close() error { return nil }

package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outboxrelay/inbox"
	"github.com/outboxrelay/outboxrelay/inbox/franzgo"
)

// kafkaSource consumes in the consumer group consumerName with franz-go,
// through the broker's fault proxy as the relays do. It commits offsets
// only after handling everything a poll returned, and blocks rebalances
// meanwhile, so that it commits only what it still owns; a crash closes
// the client uncommitted, and the partitions' next owner starts from the
// last commit.
type kafkaSource struct {
	brokers, topics []string
}

func newKafkaSource(s *sink, topics []string) consumerSource {
	return kafkaSource{brokers: strings.Split(s.flags.Lookup("kafka-brokers").Value.String(), ","), topics: topics}
}

// kafkaPoll bounds the records one poll hands over: what a crash
// leaves uncommitted.
const kafkaPoll = 200

func (k kafkaSource) instance(ctx context.Context, handle func(context.Context, inbox.Message) bool) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.brokers...),
		kgo.ConsumerGroup(consumerName),
		kgo.ConsumeTopics(k.topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// The others notice a member that left at their next heartbeat,
		// and one that could not say so (its leave refused by a broker
		// fault) when its session ends: both soon, so that the group
		// pauses briefly. 6s is kfake's shortest session.
		kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.SessionTimeout(6*time.Second),
		kgo.RebalanceTimeout(10*time.Second),
	)
	if err != nil {
		return fmt.Errorf("kafka consumer: %w", err)
	}
	defer func() {
		cl.AllowRebalance() // a blocked rebalance would hold Close
		cl.Close()
	}()
	for {
		fs := cl.PollRecords(ctx, kafkaPoll)
		if ctx.Err() != nil {
			return nil
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return fmt.Errorf("kafka consumer: fetch %s[%d]: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		for _, r := range fs.Records() {
			m, _ := franzgo.Message(r) // no valid id: a zero one, which Handle refuses
			if !handle(ctx, m) {
				return nil // closed uncommitted
			}
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return fmt.Errorf("kafka consumer: commit: %w", err)
		}
		cl.AllowRebalance()
	}
}

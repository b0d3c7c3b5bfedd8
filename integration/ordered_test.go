package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outboxrelay/internal/kafkatest"
	"github.com/outboxrelay/outboxrelay/internal/kfakebroker"
	"github.com/outboxrelay/outboxrelay/outbox"
	"github.com/outboxrelay/outboxrelay/publishers/kafka"
	"github.com/outboxrelay/outboxrelay/relay"
)

// orderedConfig is a relay.Config with ordering on for every topic.
func orderedConfig(shards int) relay.Config {
	return relay.Config{
		BatchSize: 50, PollInterval: 10 * time.Millisecond,
		Ordering: relay.Ordering{Topics: []string{"*"}, Shards: shards},
	}
}

// writeSequences writes, for each of keys keys, events 0..perKey-1 in
// sequence, each in its own transaction; writers work on different keys
// at the same time. Payloads are "<key>:<seq>".
func (b *bundle) writeSequences(topic string, keys, perKey, writers int) error {
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < keys; k += writers {
				key := fmt.Sprintf("key-%03d", k)
				for seq := 0; seq < perKey; seq++ {
					msg := outbox.Message{Topic: topic, Key: []byte(key), Payload: fmt.Appendf(nil, "%s:%d", key, seq)}
					if _, err := b.writer.Write(b.ctx, b.pool, msg); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when no writer failed
}

// Three ordered relays drain 200 keys x 15 events written in sequence, and
// one of them is restarted gracefully while they do: every key's events
// arrive in the order written.
func TestOrderedThreeRelaysKeepPerKeyOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	br := startBroker(t, kfakebroker.Options{Topics: []string{"ordered"}})
	const keys, perKey = 200, 15
	var relays []*running
	for i := 0; i < 3; i++ {
		relays = append(relays, b.startRelay(newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()}), orderedConfig(8)))
	}
	written := make(chan error, 1)
	go func() { written <- b.writeSequences("ordered", keys, perKey, 8) }()
	// Restart one relay gracefully in the middle of the run.
	await(t, 60*time.Second, func() bool { return b.count("status = 'sent'") >= keys*perKey/4 }, "nothing sent: %v", b.statuses())
	if err := relays[0].stop(t); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	b.startRelay(newKafkaPublisher(t, kafka.Config{Brokers: br.Addrs()}), orderedConfig(8))
	if err := <-written; err != nil {
		t.Fatalf("write: %v", err)
	}
	await(t, 60*time.Second, func() bool { return b.count("status = 'sent'") == keys*perKey }, "not all sent: %v", b.statuses())
	dups := kafkatest.CheckKeyOrder(t, readTopic(t, br.Addrs(), "ordered"), keys, perKey)
	if dups != 0 {
		t.Errorf("%d duplicates in a fault-free run", dups)
	}
	var shards int
	if err := b.pool.QueryRow(context.Background(), b.sql("SELECT count(*) FROM "+b.table.Related("shard_ranges"))).Scan(&shards); err != nil || shards != 8 {
		t.Errorf("shard table holds %d rows (%v), want 8", shards, err)
	}
}
